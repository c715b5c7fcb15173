//! The agent's `mcsched.io` API in tests: registered in a control plane as `install`
//! registers it (the same rendered objects), and called directly on the agent's secure
//! port as the cluster admin (a client certificate of the cluster's CA).

use std::time::Duration;

use anyhow::{Context, bail};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use mcsched_shared::api::{Explanation, WhatIf};
use mcsched_shared::explain;
use mcsched_shared::keys;
use mcsched_shared::manifests::{self, InstallOptions};

use crate::ControlPlane;

/// The first IPv4 address of this machine that is not loopback: the API server refuses
/// loopback addresses in EndpointSlices, and dials the agent there.
pub fn routable_address() -> anyhow::Result<String> {
    let out = std::process::Command::new("hostname").arg("-I").output()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|a| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| !ip.is_loopback())
        })
        .map(String::from)
        .ok_or_else(|| {
            anyhow::anyhow!("this machine has no non-loopback IPv4 address (hostname -I)")
        })
}

fn resource_of(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Applies what `install` renders for the API alone: its namespace, the selector-less
/// Service and the APIService (the agent runs as a process here, not as the Deployment).
/// The agent as `install` runs it, out of cluster: the admin's kubeconfig impersonating the
/// agent's ServiceAccount (its RBAC only, on the host), the aggregated API registered and
/// reaching it; `extra` arguments added. Returns once the API is available.
pub async fn agent_as_installed(
    host: &ControlPlane,
    extra: &[&str],
) -> anyhow::Result<crate::Agent> {
    let admin = std::fs::read_to_string(&host.kubeconfig)?;
    let mut as_agent = String::new();
    for line in admin.lines() {
        as_agent.push_str(line);
        as_agent.push('\n');
        if line == "  user:" {
            as_agent.push_str("    as: system:serviceaccount:mcsched-system:mcsched-agent\n");
        }
    }
    anyhow::ensure!(as_agent.contains("    as: "), "no user in {admin}");
    let agent_kc = host.dir().join("agent.kubeconfig");
    std::fs::write(&agent_kc, as_agent)?;
    register(&host.client).await?;
    let address = routable_address()?;
    let mut args = vec!["--leader-elect=false", "--advertise-address", &address];
    args.extend_from_slice(extra);
    let agent = crate::Agent::start_on(
        &address,
        &agent_kc,
        "mcsched",
        host.dir(),
        "as-installed",
        &args,
    )?;
    wait_available(&host.client, Duration::from_secs(60))
        .await
        .map_err(|e| e.context(agent.logs()))?;
    Ok(agent)
}

pub async fn register(client: &Client) -> anyhow::Result<()> {
    let objects = manifests::render(&InstallOptions::default())?;
    let wanted = |o: &manifests::Object| {
        o.kind() == "Namespace"
            || o.kind() == "APIService"
            || (o.kind() == "Service" && o.name() == keys::API_SERVICE)
    };
    let mut applied = 0;
    for o in objects.iter().filter(|o| wanted(o)) {
        let ar = resource_of(o.api_version(), o.kind());
        let api: Api<DynamicObject> = match o.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.patch(
            o.name(),
            &PatchParams::apply("mcsched-e2e").force(),
            &Patch::Apply(o.to_json()),
        )
        .await
        .with_context(|| format!("applying {}", o.reference()))?;
        applied += 1;
    }
    if applied != 3 {
        bail!("install renders {applied} of the API's 3 objects");
    }
    Ok(())
}

/// Waits until the API server finds the APIService Available (the leader published
/// itself and answers discovery).
pub async fn wait_available(client: &Client, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource_of("apiregistration.k8s.io/v1", "APIService"),
    );
    let conditions = || async {
        let s = api.get(keys::API_SERVICE_NAME).await?;
        anyhow::Ok(s.data["status"]["conditions"].clone())
    };
    let result = crate::wait::until(timeout, "the mcsched.io APIService Available", || async {
        let available = conditions().await?.as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
        });
        Ok(available.then_some(()))
    })
    .await;
    match result {
        Ok(()) => Ok(()),
        Err(e) => {
            let last = conditions()
                .await
                .map(|c| c.to_string())
                .unwrap_or_default();
            Err(e.context(format!("APIService conditions: {last}")))
        }
    }
}

/// A client of the agent's secure port with the admin's client certificate; the agent's
/// own certificate is not checked (its CA is the APIService's business).
pub fn admin_https(cp: &ControlPlane) -> anyhow::Result<reqwest::Client> {
    let identity = reqwest::Identity::from_pem(&cp.admin_identity_pem()?)?;
    Ok(reqwest::Client::builder()
        .identity(identity)
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(60))
        .build()?)
}

/// `GET .../namespaces/{ns}/explanations/{name}` on the agent itself.
pub async fn explain(
    http: &reqwest::Client,
    agent_url: &str,
    namespace: &str,
    name: &str,
) -> anyhow::Result<explain::Explanation> {
    let path = mcsched_shared::api::namespaced_path(namespace, keys::EXPLANATIONS);
    let resp = http.get(format!("{agent_url}{path}/{name}")).send().await?;
    let status = resp.status();
    let body = resp.text().await?;
    if !status.is_success() {
        bail!("explanation of {namespace}/{name}: {status}: {body}");
    }
    let e: Explanation = serde_json::from_str(&body)?;
    Ok(e.status)
}

/// `POST .../namespaces/{ns}/whatifs` of a pod (JSON) on the agent itself: the raw
/// response, for status checks.
pub async fn post_what_if(
    http: &reqwest::Client,
    agent_url: &str,
    namespace: &str,
    pod: &serde_json::Value,
) -> anyhow::Result<reqwest::Response> {
    let template = serde_json::from_value(serde_json::json!({
        "metadata": pod.get("metadata").cloned().unwrap_or_default(),
        "spec": pod.get("spec").cloned().unwrap_or_default(),
    }))?;
    let mut body = WhatIf::new(namespace, template);
    body.spec
        .template
        .metadata
        .get_or_insert_default()
        .namespace = None;
    let path = mcsched_shared::api::namespaced_path(namespace, keys::WHATIFS);
    Ok(http
        .post(format!("{agent_url}{path}"))
        .json(&body)
        .send()
        .await?)
}

/// A what-if's answer.
pub async fn what_if(
    http: &reqwest::Client,
    agent_url: &str,
    namespace: &str,
    pod: &serde_json::Value,
) -> anyhow::Result<explain::Explanation> {
    let resp = post_what_if(http, agent_url, namespace, pod).await?;
    let status = resp.status();
    let body = resp.text().await?;
    if status != reqwest::StatusCode::CREATED {
        bail!("what-if: {status}: {body}");
    }
    let answer: WhatIf = serde_json::from_str(&body)?;
    answer
        .status
        .ok_or_else(|| anyhow::anyhow!("what-if answered without a status: {body}"))
}

/// An agent serving the API through `cp`'s API server: the API registered as `install`
/// registers it, the agent on a routable address advertising it, the APIService
/// Available (`kubectl mcsched explain` works).
pub async fn start_agent(
    cp: &ControlPlane,
    scheduler_name: &str,
    id: &str,
    extra: &[&str],
) -> anyhow::Result<crate::Agent> {
    register(&cp.client).await?;
    let address = routable_address()?;
    let mut args = vec!["--advertise-address", address.as_str()];
    args.extend_from_slice(extra);
    let agent = crate::Agent::start_on(
        &address,
        &cp.kubeconfig,
        scheduler_name,
        cp.dir(),
        id,
        &args,
    )?;
    wait_available(&cp.client, Duration::from_secs(60))
        .await
        .map_err(|e| e.context(agent.logs()))?;
    Ok(agent)
}
