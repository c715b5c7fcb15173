//! The agent's serving certificate (`--tls-cert-file`) rotated as cert-manager rotates
//! it, while requests run: new connections get the new certificate, and none fails.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcsched_agent::api::server::tls::ServingCert;
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions};

/// The chain as PEM and the key, each file replaced by a rename as a Secret volume's
/// files are: for a moment the certificate is the new one and the key the old.
fn write_files(cert: &ServingCert, crt: &Path, key: &Path) -> anyhow::Result<()> {
    use base64::Engine;
    let mut pem = String::new();
    for der in &cert.chain {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line)?);
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    let replace = |path: &Path, bytes: &[u8]| -> anyhow::Result<()> {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    };
    replace(crt, pem.as_bytes())?;
    std::thread::sleep(Duration::from_millis(500));
    replace(key, cert.key_pem())
}

/// A new client (so a new TLS session, no resumption) trusting the CAs of `trusted`.
fn client(trusted: &[&ServingCert]) -> anyhow::Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5));
    for c in trusted {
        let ca = c
            .ca_pem
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("no CA"))?;
        b = b.add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes())?);
    }
    Ok(b.build()?)
}

async fn healthy(trusted: &[&ServingCert], url: &str) -> bool {
    match client(trusted) {
        Ok(c) => c
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success()),
        Err(_) => false,
    }
}

async fn until(
    what: &str,
    timeout: Duration,
    mut f: impl AsyncFnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("timed out after {timeout:?} waiting for {what}")
}

#[tokio::test]
async fn a_rotated_serving_certificate_is_served_without_a_restart_or_a_failed_request()
-> anyhow::Result<()> {
    let cp = ControlPlane::start("serving-cert", ControlPlaneOptions::default()).await?;
    let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let (a, b) = (
        ServingCert::generate(names.clone())?,
        ServingCert::generate(names)?,
    );
    let (crt, key) = (cp.dir().join("tls.crt"), cp.dir().join("tls.key"));
    write_files(&a, &crt, &key)?;
    let mut agent = Agent::start_with(
        &cp.kubeconfig,
        "mcsched",
        cp.dir(),
        "agent",
        &[
            &format!("--tls-cert-file={}", crt.display()),
            &format!("--tls-private-key-file={}", key.display()),
        ],
    )?;
    let url = format!("{}/healthz", agent.url);
    until("the agent serving a", Duration::from_secs(60), async || {
        healthy(&[&a], &url).await
    })
    .await?;
    assert!(!healthy(&[&b], &url).await, "b is not served yet");

    // Two clients trusting either CA, each request a new connection and handshake.
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..2)
        .map(|_| {
            let (url, stop, a, b) = (url.clone(), stop.clone(), a.clone(), b.clone());
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0u32, 0u32);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
                while !stop.load(Ordering::Relaxed) && tokio::time::Instant::now() < deadline {
                    if healthy(&[&a, &b], &url).await {
                        ok += 1;
                    } else {
                        failed += 1;
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    write_files(&b, &crt, &key)?;
    // The agent reads its files every 10 s.
    until("the agent serving b", Duration::from_secs(30), async || {
        healthy(&[&b], &url).await
    })
    .await?;
    assert!(!healthy(&[&a], &url).await, "a is no longer served");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for l in load {
        let (o, f) = l.await?;
        ok += o;
        failed += f;
    }
    assert_eq!(
        failed, 0,
        "requests failed across the rotation ({ok} answered)"
    );
    assert!(ok >= 20, "requests ran all along: {ok}");
    assert!(
        agent
            .logs()
            .contains("serving certificate reloaded from its files"),
        "{}",
        agent.logs()
    );
    agent.stop();
    Ok(())
}
