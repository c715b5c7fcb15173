//! Real Kubernetes control planes, one `controlplane` process per cluster.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tempfile::TempDir;

use crate::process::Guarded;

const START_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug, Clone, Copy, Default)]
pub struct ControlPlaneOptions {
    pub with_controller_manager: bool,
    pub with_scheduler: bool,
    pub simulate_kubelets: bool,
}

impl ControlPlaneOptions {
    /// kube-controller-manager, kube-scheduler and the kubelet simulator: a whole cluster.
    pub fn full() -> Self {
        ControlPlaneOptions {
            with_controller_manager: true,
            with_scheduler: true,
            simulate_kubelets: true,
        }
    }
}

pub struct ControlPlane {
    pub name: String,
    pub url: String,
    pub kubeconfig: PathBuf,
    pub client: Client,
    // Dropped before `dir`, so the process stops before its data directory goes.
    process: Guarded,
    /// The `controlplane` arguments, for a restart on the same data.
    args: Vec<std::ffi::OsString>,
    /// The Kubernetes minor of its binary ([`binary_for`]), the same on a restart.
    minor: &'static str,
    restarts: usize,
    dir: TempDir,
}

/// The Kubernetes minor `.build/controlplane` (`make controlplane`) is built from, what
/// [`ControlPlane::start`] and the other starts without a minor run.
pub const DEFAULT_MINOR: &str = "1.37";

/// The minors a host cluster may run: the tested version window.
pub const HOST_MINORS: [&str; 3] = ["1.35", "1.36", "1.37"];

/// The minors a leaf cluster may run: the tested version window.
pub const LEAF_MINORS: [&str; 4] = ["1.34", "1.35", "1.36", "1.37"];

/// The oldest leaf minor (`make controlplane-oldest-leaf` builds its control plane).
pub const OLDEST_LEAF_MINOR: &str = LEAF_MINORS[0];

/// The `controlplane` binary: `$MCSCHED_CONTROLPLANE`, else what `make controlplane` built.
pub fn binary() -> PathBuf {
    std::env::var_os("MCSCHED_CONTROLPLANE")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join(".build/controlplane"))
}

/// The `controlplane` binary of a Kubernetes minor ("1.34"): [`binary`] for
/// [`DEFAULT_MINOR`], else `$MCSCHED_CONTROLPLANE_V1_34`, else what `make
/// controlplane-v1.34` built (`.build/controlplane-v1.34`).
pub fn binary_for(minor: &str) -> PathBuf {
    if minor == DEFAULT_MINOR {
        return binary();
    }
    std::env::var_os(format!("MCSCHED_CONTROLPLANE_V{}", minor.replace('.', "_")))
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join(format!(".build/controlplane-v{minor}")))
}

/// The make target that builds [`binary_for`]`(minor)`.
fn make_target(minor: &str) -> String {
    if minor == DEFAULT_MINOR {
        "controlplane".to_string()
    } else {
        format!("controlplane-v{minor}")
    }
}

/// The `--feature-gates` value that turns kube's workload-aware scheduling on in a minor's
/// control plane (API server, kube-scheduler, controllers), or `None` where the minor has
/// no Workload API (1.34). v1.37 folded the GangScheduling and WorkloadAwarePreemption
/// gates into GenericWorkload and refuses their names; 1.36's WorkloadAwarePreemption
/// (alpha) stays off here; 1.35 has no TopologyAwareWorkloadScheduling gate. The API
/// server then serves the minor's Workload group version: v1alpha1 on 1.35 (Workloads
/// only, no PodGroup objects), v1alpha2 on 1.36, v1beta1 on 1.37.
pub fn workload_feature_gates(minor: &str) -> Option<&'static str> {
    match minor {
        "1.35" => Some("GenericWorkload=true,GangScheduling=true"),
        "1.36" => {
            Some("GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true")
        }
        "1.37" => Some("GenericWorkload=true,TopologyAwareWorkloadScheduling=true"),
        _ => None,
    }
}

impl ControlPlane {
    pub async fn start(name: &str, options: ControlPlaneOptions) -> anyhow::Result<Self> {
        let mut all = Self::start_many(&[name], options).await?;
        all.pop().context("no control plane started")
    }

    /// As [`start`](Self::start), with more `controlplane` flags (`--bind-address`,
    /// `--real-nodes`, ...).
    pub async fn start_with_args(
        name: &str,
        options: ControlPlaneOptions,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::spawn(name, DEFAULT_MINOR, options, args).await
    }

    /// As [`start_with_args`](Self::start_with_args), with the control plane of a
    /// Kubernetes minor of the version window ([`HOST_MINORS`], [`LEAF_MINORS`]):
    /// `.build/controlplane-v1.34` for "1.34" (`make controlplane-v1.34`).
    pub async fn start_minor(
        name: &str,
        minor: &'static str,
        options: ControlPlaneOptions,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::spawn(name, minor, options, args).await
    }

    /// As [`start_many`](Self::start_many), each with the control plane of `minor`.
    pub async fn start_many_minor(
        names: &[&str],
        minor: &'static str,
        options: ControlPlaneOptions,
    ) -> anyhow::Result<Vec<Self>> {
        let starts = names
            .iter()
            .map(|name| Self::spawn(name, minor, options, &[]));
        futures::future::join_all(starts)
            .await
            .into_iter()
            .collect()
    }

    /// Starts one control plane per name, all at once; any that started are stopped
    /// again if one fails.
    pub async fn start_many(
        names: &[&str],
        options: ControlPlaneOptions,
    ) -> anyhow::Result<Vec<Self>> {
        Self::start_many_minor(names, DEFAULT_MINOR, options).await
    }

    async fn spawn(
        name: &str,
        minor: &'static str,
        options: ControlPlaneOptions,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        if !LEAF_MINORS.contains(&minor) && !HOST_MINORS.contains(&minor) {
            bail!(
                "no control plane of Kubernetes {minor}: the version window is {LEAF_MINORS:?} (leaves), {HOST_MINORS:?} (hosts)"
            );
        }
        let bin = binary_for(minor);
        if !bin.exists() {
            bail!(
                "{} does not exist: build it with `make {}`",
                bin.display(),
                make_target(minor)
            );
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("mcsched-{name}-"))
            // Logs and data kept for a post-mortem when asked.
            .disable_cleanup(std::env::var_os("MCSCHED_KEEP_TEST_DIRS").is_some())
            .tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        let log = dir.path().join("controlplane.log");
        let mut cmd = Command::new(&bin);
        cmd.arg("--name")
            .arg(name)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--kubeconfig")
            .arg(&kubeconfig);
        if options.with_controller_manager {
            cmd.arg("--with-controller-manager");
        }
        if options.with_scheduler {
            cmd.arg("--with-scheduler");
        }
        if options.simulate_kubelets {
            cmd.arg("--simulate-kubelets");
        }
        cmd.args(args);
        let args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_os_string()).collect();
        let (process, url) = launch(cmd, &bin, name, &log).await?;
        let client = client_for(&kubeconfig).await?;
        Ok(ControlPlane {
            name: name.to_string(),
            url,
            kubeconfig,
            client,
            process,
            args,
            minor,
            restarts: 0,
            dir,
        })
    }

    /// Stops the control plane (SIGKILL when `crash`, else SIGTERM) and starts it again
    /// on the same etcd data, certificates and port: its clients, this one and the
    /// kubeconfig's, reconnect as to a restarted API server.
    pub async fn restart(&mut self, crash: bool) -> anyhow::Result<()> {
        if crash {
            self.signal(libc::SIGKILL);
        }
        self.process.stop(Duration::from_secs(15));
        let port = self
            .url
            .rsplit(':')
            .next()
            .context("control plane URL without a port")?
            .to_string();
        self.restarts += 1;
        let log = self
            .dir
            .path()
            .join(format!("controlplane-restart{}.log", self.restarts));
        let bin = binary_for(self.minor);
        let mut cmd = Command::new(&bin);
        cmd.args(&self.args).arg("--port").arg(&port);
        let (process, url) = launch(cmd, &bin, &self.name, &log).await?;
        if url != self.url {
            bail!(
                "control plane {} came back at {url}, not {}",
                self.name,
                self.url
            );
        }
        self.process = process;
        Ok(())
    }

    /// A kubeconfig of the admin impersonating `user` (still in system:masters), so that
    /// the audit log tells apart the processes that use it (agent replicas).
    pub fn kubeconfig_as(&self, user: &str) -> anyhow::Result<PathBuf> {
        let mut kc = Kubeconfig::read_from(&self.kubeconfig)?;
        for named in &mut kc.auth_infos {
            if let Some(a) = named.auth_info.as_mut() {
                a.impersonate = Some(user.to_string());
                a.impersonate_groups = Some(vec!["system:masters".into()]);
            }
        }
        let path = self.dir().join(format!("kubeconfig-as-{user}"));
        std::fs::write(&path, mcsched_shared::yaml::to_string(&kc)?)?;
        Ok(path)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The Kubernetes minor its control plane binary is built from ("1.37").
    pub fn minor(&self) -> &'static str {
        self.minor
    }

    /// `controlplane`'s `--data-dir` (etcd, certificates, an `--audit-log` given relative).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Where `controlplane` writes its certificates and keys (`--data-dir`/pki).
    pub fn pki_dir(&self) -> PathBuf {
        self.dir.path().join("data").join("pki")
    }

    /// The front-proxy CA, as kubeadm names it: what an extension API server trusts the
    /// aggregator's X-Remote-* headers from (`--requestheader-client-ca-file`).
    pub fn front_proxy_ca(&self) -> PathBuf {
        self.pki_dir().join("front-proxy-ca.crt")
    }

    /// The cluster CA certificate (PEM), which signed kube-apiserver's serving certificate
    /// and the admin's client certificate.
    pub fn ca_pem(&self) -> anyhow::Result<Vec<u8>> {
        read(&self.pki_dir().join("ca.crt"))
    }

    /// The admin's client certificate followed by its private key (PEM), the identity of
    /// `kubeconfig` (user `mcsched-admin`, group `system:masters`): for calling a component
    /// directly, e.g. with `reqwest::Identity::from_pem`.
    pub fn admin_identity_pem(&self) -> anyhow::Result<Vec<u8>> {
        let mut pem = read(&self.pki_dir().join("admin.crt"))?;
        pem.extend(read(&self.pki_dir().join("admin.key"))?);
        Ok(pem)
    }

    /// Freezes the whole control plane (SIGSTOP): its API server stops answering, as a
    /// cluster cut off by the network would.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Undoes [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(pid) = self.pid().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) on our own child's pid, which is not reaped while `self` lives.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }
}

/// Spawns `controlplane` and waits for its READY line: the process and its URL.
async fn launch(
    cmd: Command,
    bin: &Path,
    name: &str,
    log: &Path,
) -> anyhow::Result<(Guarded, String)> {
    let mut process = Guarded::spawn(cmd, &format!("control plane {name}"), log)
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let stdout = process
        .child_mut()
        .and_then(|c| c.stdout.take())
        .context("control plane stdout not captured")?;

    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut ready_tx = Some(ready_tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("READY ")
                && let Some(tx) = ready_tx.take()
            {
                let url = rest
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                let _ = tx.send(url);
            }
        }
    });
    let url = match tokio::time::timeout(START_TIMEOUT, ready_rx).await {
        Ok(Ok(url)) => url,
        Ok(Err(_)) => {
            let status = process.stop(Duration::from_secs(1));
            bail!(
                "control plane {name} exited ({status:?}) before it was ready:\n{}",
                tail(log)
            );
        }
        Err(_) => bail!(
            "control plane {name} not ready after {START_TIMEOUT:?}:\n{}",
            tail(log)
        ),
    };
    Ok((process, url))
}

/// A client from a kubeconfig file, with its current context.
pub async fn client_for(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// The last lines of a log, to show why a process failed.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
