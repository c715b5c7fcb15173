//! A real node for end-to-end tests: the kubelet built into `controlplane` (`controlplane
//! kubelet`, from the same `k8s.io/kubernetes` modules as the control plane) against a
//! containerd of the test's own (own config, state, root and socket: a system containerd
//! is never touched), runc, and CNI bridge + host-local from Debian's
//! containernetworking-plugins. Images are built locally (`make test-images`, `make image`)
//! and imported with `ctr`: nothing is ever pulled.
//!
//! Each node takes a numbered slot `n` (a lock file in `/run/mcsched-e2e`), which names
//! everything it makes on the host and removes again when it stops:
//! - bridge `mcsched<n>` with `10.89.<n>.1/24`, the pods' network (one /24 per node);
//! - nftables table `ip mcsched<n>`: what kube-proxy would do for the `kubernetes` Service
//!   (10.0.0.1:443 DNAT to the API server) for this node's pods alone, and a forward filter
//!   that keeps the pods' packets on this machine (kube-proxy itself cannot run: every
//!   test cluster uses the same Service range on one host);
//! - cgroup `<the test's own memory cgroup>/mcsched-e2e-<n>` in every v1 hierarchy (on a
//!   cgroup v2 host `/mcsched-e2e-<n>`), the kubelet's `cgroupRoot`.
//!
//! A slot whose owner died (a killed test) is cleaned up by the next test that finds it.
//! The control plane must serve on an address the pods can reach: start it with
//! [`control_plane`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use tempfile::TempDir;

use crate::process::Guarded;
use crate::{ControlPlane, ControlPlaneOptions};

/// The pod sandbox image, built by `make test-images` (tools/image/pause).
pub const PAUSE_IMAGE: &str = "mcsched.test/pause:1";
/// A small HTTP server saying `hello from <pod>` on :8080 (tools/image/hello).
pub const HELLO_IMAGE: &str = "mcsched.test/hello:1";

const LOCK_DIR: &str = "/run/mcsched-e2e";
const SLOTS: u32 = 200;
const CNI_PLUGINS: &str = "/usr/lib/cni";
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Where `make image` and `make test-images` write their archives.
pub fn image_dir() -> PathBuf {
    crate::repo_root().join(".build/image")
}

/// The agent image `make image` built: its archive and its reference.
pub fn agent_image() -> anyhow::Result<(PathBuf, String)> {
    let archive = image_dir().join("mcsched-agent.tar");
    let ref_file = image_dir().join("mcsched-agent.ref");
    if !archive.exists() || !ref_file.exists() {
        bail!(
            "the agent image is missing ({} and {}): build it with `make image`",
            archive.display(),
            ref_file.display()
        );
    }
    let reference = fs::read_to_string(&ref_file)?.trim().to_string();
    Ok((archive, reference))
}

/// What this machine lacks to run a real node, each with how to get it; empty when
/// nothing is missing.
pub fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root (containerd, runc and the kubelet need it)".to_string());
    }
    for (tool, package) in [
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("nft", "nftables"),
        ("ip", "iproute2"),
        ("mount", "mount"),
    ] {
        if which(tool).is_none() {
            missing.push(format!("{tool} (Debian package {package})"));
        }
    }
    for plugin in ["bridge", "host-local", "loopback"] {
        let path = Path::new(CNI_PLUGINS).join(plugin);
        if !path.exists() {
            missing.push(format!(
                "{} (Debian package containernetworking-plugins)",
                path.display()
            ));
        }
    }
    let controlplane = crate::controlplane::binary();
    if !controlplane.exists() {
        missing.push(format!(
            "{} (build it with `make controlplane`)",
            controlplane.display()
        ));
    }
    for image in ["pause", "hello"] {
        let archive = image_dir().join(format!("{image}.tar"));
        if !archive.exists() {
            missing.push(format!(
                "{} (build it with `make test-images`)",
                archive.display()
            ));
        }
    }
    if !Path::new("/proc/self/cgroup").exists() {
        missing.push("cgroups (/proc/self/cgroup)".to_string());
    }
    missing
}

/// Fails, naming everything missing, unless this machine can run a real node.
pub fn require() -> anyhow::Result<()> {
    let missing = missing();
    if !missing.is_empty() {
        bail!(
            "a real node cannot run on this machine; missing: {}. `scripts/setup.sh` (as root) \
             installs the Debian packages; `make test-images` builds the images",
            missing.join("; ")
        );
    }
    Ok(())
}

/// A control plane whose nodes are real kubelets: kube-controller-manager and
/// kube-scheduler in-process, kube-apiserver on this machine's routable address (the pods
/// reach it there, through the `kubernetes` Service), ServiceAccount admission on (pods
/// get their token volume), no kubelet simulator.
pub async fn control_plane(name: &str) -> anyhow::Result<ControlPlane> {
    control_plane_with(name, false, &[]).await
}

/// [`control_plane`], with the kubelet simulator beside the real kubelets when
/// `simulate_kubelets` (it runs the pods of nodes no real kubelet registered: many nodes
/// as API objects next to one real node), and more `controlplane` arguments.
pub async fn control_plane_with(
    name: &str,
    simulate_kubelets: bool,
    extra_args: &[&str],
) -> anyhow::Result<ControlPlane> {
    require()?;
    let address = crate::api::routable_address()?;
    let mut args = vec!["--bind-address", &address, "--real-nodes"];
    args.extend_from_slice(extra_args);
    ControlPlane::start_with_args(
        name,
        ControlPlaneOptions {
            with_controller_manager: true,
            with_scheduler: true,
            simulate_kubelets,
        },
        &args,
    )
    .await
}

/// Waits until the controller-manager has made ServiceAccount `default` in `namespace`:
/// ServiceAccount admission refuses pods before that.
pub async fn wait_default_service_account(
    cp: &ControlPlane,
    namespace: &str,
) -> anyhow::Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(cp.client.clone(), namespace);
    crate::wait::until(
        Duration::from_secs(60),
        &format!("ServiceAccount {namespace}/default"),
        || {
            let accounts = accounts.clone();
            async move { Ok(accounts.get_opt("default").await?.map(|_| ())) }
        },
    )
    .await
}

/// What a node needs of its control plane: where the API server is, the admin kubeconfig
/// (its server and CA) and the CA that signs the node's credentials.
pub struct NodeCluster {
    pub url: String,
    pub kubeconfig: PathBuf,
    pub pki_dir: PathBuf,
    pub client: kube::Client,
}

impl NodeCluster {
    pub fn of(cp: &ControlPlane) -> Self {
        NodeCluster {
            url: cp.url.clone(),
            kubeconfig: cp.kubeconfig.clone(),
            pki_dir: cp.pki_dir(),
            client: cp.client.clone(),
        }
    }

    /// A control plane started elsewhere (`controlplane --data-dir D --kubeconfig K`):
    /// its certificates are in `D/pki`.
    pub async fn from_files(kubeconfig: &Path, pki_dir: &Path) -> anyhow::Result<Self> {
        let config = kube::config::Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let url = config
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone())
            .with_context(|| format!("{} names no server", kubeconfig.display()))?;
        if !pki_dir.join("ca.key").exists() {
            bail!("{} holds no ca.key", pki_dir.display());
        }
        Ok(NodeCluster {
            url,
            kubeconfig: kubeconfig.to_path_buf(),
            pki_dir: pki_dir.to_path_buf(),
            client: crate::controlplane::client_for(kubeconfig).await?,
        })
    }
}

/// One node: containerd and a kubelet registered in a control plane.
pub struct RealNode {
    pub name: String,
    /// The node's InternalIP (the kubelet serves there).
    pub address: String,
    /// The pods' subnet on this node, `10.89.<n>.0/24`.
    pub pod_subnet: String,
    socket: PathBuf,
    kubelet: Option<Guarded>,
    containerd: Option<Guarded>,
    slot: Option<Slot>,
    // Dropped last: the logs stay readable until everything stopped.
    dir: TempDir,
}

impl RealNode {
    /// Starts containerd (with the pause and hello images imported) and a kubelet that
    /// registers Node `name` in `cp`; returns once the Node is Ready.
    pub async fn start(cp: &ControlPlane, name: &str) -> anyhow::Result<Self> {
        Self::start_in(&NodeCluster::of(cp), name).await
    }

    /// [`RealNode::start`] for a control plane this process did not start.
    pub async fn start_in(cp: &NodeCluster, name: &str) -> anyhow::Result<Self> {
        require()?;
        let address = crate::api::routable_address()?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("mcsched-node-{name}-"))
            .tempdir()?;
        let slot = Slot::claim(dir.path())?;
        let n = slot.n;
        let mut node = RealNode {
            name: name.to_string(),
            address,
            pod_subnet: format!("10.89.{n}.0/24"),
            socket: dir.path().join("containerd.sock"),
            kubelet: None,
            containerd: None,
            slot: Some(slot),
            dir,
        };
        node.network(cp)?;
        node.start_containerd().await?;
        for image in ["pause", "hello"] {
            node.import(&image_dir().join(format!("{image}.tar")))?;
        }
        node.start_kubelet(cp)?;
        node.wait_ready(cp).await?;
        Ok(node)
    }

    fn slot(&self) -> &Slot {
        self.slot.as_ref().expect("a running node has its slot")
    }

    /// The bridge, its nftables table and the CNI configuration.
    fn network(&self, cp: &NodeCluster) -> anyhow::Result<()> {
        let slot = self.slot();
        let bridge = slot.bridge();
        let gateway = format!("10.89.{}.1", slot.n);
        run("ip", &["link", "add", "name", &bridge, "type", "bridge"])?;
        run(
            "ip",
            &["addr", "add", &format!("{gateway}/24"), "dev", &bridge],
        )?;
        run("ip", &["link", "set", &bridge, "up"])?;

        let api = cp
            .url
            .strip_prefix("https://")
            .context("the control plane's URL is not https://")?;
        let (api_host, api_port) = api
            .rsplit_once(':')
            .context("the control plane's URL has no port")?;
        let rules = format!(
            r#"table ip {table} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{bridge}" ip daddr 10.0.0.1 tcp dport 443 dnat to {api_host}:{api_port}
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname "{bridge}" oifname != "{bridge}" drop
    oifname "{bridge}" iifname != "{bridge}" drop
  }}
}}
"#,
            table = slot.table(),
        );
        let rules_file = self.dir.path().join("nftables.conf");
        fs::write(&rules_file, rules)?;
        run("nft", &["-f", &rules_file.to_string_lossy()])?;

        let net_d = self.dir.path().join("net.d");
        fs::create_dir_all(&net_d)?;
        let conflist = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": format!("mcsched-{}", self.name),
            "plugins": [{
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": self.pod_subnet, "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": self.dir.path().join("cni-ipam"),
                },
            }, {"type": "loopback"}],
        });
        fs::write(
            net_d.join("10-mcsched.conflist"),
            serde_json::to_vec_pretty(&conflist)?,
        )?;
        Ok(())
    }

    async fn start_containerd(&mut self) -> anyhow::Result<()> {
        let d = self.dir.path();
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Test machines may lack CAP_SYS_RESOURCE (this one does): no container asks for an OOM
  # score below containerd's own, which it could not set.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc_root}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_PLUGINS}"
    conf_dir = "{net_d}"
    max_conf_num = 1
"#,
            root = d.join("containerd-root").display(),
            state = d.join("containerd-state").display(),
            socket = self.socket.display(),
            opt = d.join("containerd-opt").display(),
            runc_root = d.join("runc").display(),
            net_d = d.join("net.d").display(),
        );
        let config_file = d.join("containerd.toml");
        fs::write(&config_file, config)?;
        let mut cmd = Command::new("containerd");
        cmd.arg("--config")
            .arg(&config_file)
            .env("PATH", sbin_path());
        let log = d.join("containerd.log");
        let mut process = Guarded::spawn(cmd, &format!("containerd of node {}", self.name), &log)
            .context("cannot start containerd")?;
        drain_stdout(&mut process);
        self.containerd = Some(process);
        let socket = self.socket.clone();
        crate::wait::until(
            Duration::from_secs(30),
            "containerd to answer on its socket",
            || {
                let socket = socket.clone();
                async move {
                    let out = Command::new("ctr")
                        .arg("--address")
                        .arg(&socket)
                        .arg("version")
                        .output()?;
                    Ok(out.status.success().then_some(()))
                }
            },
        )
        .await
        .with_context(|| format!("containerd log:\n{}", crate::controlplane::tail(&log)))
    }

    fn start_kubelet(&mut self, cp: &NodeCluster) -> anyhow::Result<()> {
        let d = self.dir.path();
        let mut cmd = Command::new(crate::controlplane::binary());
        cmd.arg("kubelet")
            .arg("--cluster-kubeconfig")
            .arg(&cp.kubeconfig)
            .arg("--pki-dir")
            .arg(&cp.pki_dir)
            .arg("--node-name")
            .arg(&self.name)
            .arg("--node-ip")
            .arg(&self.address)
            .arg("--root-dir")
            .arg(d.join("kubelet"))
            .arg("--container-runtime-endpoint")
            .arg(format!("unix://{}", self.socket.display()))
            .arg("--cgroup-root")
            .arg(&self.slot().cgroup_root)
            .env("PATH", sbin_path());
        let mut process = Guarded::spawn(
            cmd,
            &format!("kubelet of node {}", self.name),
            &d.join("kubelet.log"),
        )
        .context("cannot start the kubelet")?;
        drain_stdout(&mut process);
        self.kubelet = Some(process);
        Ok(())
    }

    async fn wait_ready(&mut self, cp: &NodeCluster) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(cp.client.clone());
        let name = self.name.clone();
        let ready = crate::wait::until(NODE_READY_TIMEOUT, &format!("node {name} Ready"), || {
            let nodes = nodes.clone();
            let name = name.clone();
            async move {
                let Some(node) = nodes.get_opt(&name).await? else {
                    return Ok(None);
                };
                let ready = node
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                Ok(ready.then_some(()))
            }
        })
        .await;
        if let Err(e) = ready {
            let exited = self
                .kubelet
                .as_mut()
                .and_then(|k| k.child_mut())
                .and_then(|c| c.try_wait().ok().flatten());
            bail!(
                "{e:#}\nkubelet {}:\n{}",
                match exited {
                    Some(status) => format!("exited ({status})"),
                    None => "still running".to_string(),
                },
                self.kubelet_log()
            );
        }
        Ok(())
    }

    /// `ctr` against this node's containerd, in the CRI's namespace `k8s.io`.
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<Output> {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .arg("--namespace")
            .arg("k8s.io")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running ctr")
    }

    /// Imports an image archive (`docker save` format or OCI) into the node's containerd,
    /// where the kubelet finds it (pods need `imagePullPolicy: IfNotPresent` or `Never`).
    pub fn import(&self, archive: &Path) -> anyhow::Result<()> {
        let archive = archive.to_string_lossy();
        let out = self.ctr(&["images", "import", &archive])?;
        if !out.status.success() {
            bail!("ctr images import {archive}: {}", crate::cli::text(&out));
        }
        Ok(())
    }

    /// Kills a container through containerd, as an OOM kill or a crash would end it:
    /// `ctr tasks kill --signal SIGKILL`. `container_id` is the pod status's
    /// `containerID`, with or without its `containerd://` prefix.
    pub fn kill_container(&self, container_id: &str) -> anyhow::Result<()> {
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(container_id);
        let out = self.ctr(&["tasks", "kill", "--signal", "SIGKILL", id])?;
        if !out.status.success() {
            bail!("ctr tasks kill {id}: {}", crate::cli::text(&out));
        }
        Ok(())
    }

    /// The containers (tasks) running in this node's containerd, pause containers
    /// included, with the pid of each one's main process.
    pub fn running_tasks(&self) -> anyhow::Result<BTreeMap<String, u32>> {
        let out = self.ctr(&["tasks", "list"])?;
        if !out.status.success() {
            bail!("ctr tasks list: {}", crate::cli::text(&out));
        }
        // TASK  PID  STATUS
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .filter_map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    [id, pid, "RUNNING"] => Some((id.to_string(), pid.parse().ok()?)),
                    _ => None,
                }
            })
            .collect())
    }

    /// The ids of the running containers (see [`running_tasks`](Self::running_tasks)).
    pub fn running_containers(&self) -> anyhow::Result<BTreeSet<String>> {
        Ok(self.running_tasks()?.into_keys().collect())
    }

    /// The host pid of a running container's main process; `container_id` as in
    /// [`kill_container`](Self::kill_container).
    pub fn container_pid(&self, container_id: &str) -> anyhow::Result<u32> {
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(container_id);
        self.running_tasks()?
            .get(id)
            .copied()
            .with_context(|| format!("container {id} is not running in node {}", self.name))
    }

    /// The memory of a container's main process (resident set now and at its peak).
    pub fn container_memory(&self, container_id: &str) -> anyhow::Result<ContainerMemory> {
        let pid = self.container_pid(container_id)?;
        let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| -> Option<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .map(|kib| kib * 1024)
        };
        Ok(ContainerMemory {
            pid,
            rss_bytes: field("VmRSS:").unwrap_or_default(),
            peak_rss_bytes: field("VmHWM:").unwrap_or_default(),
        })
    }

    pub fn kubelet_log(&self) -> String {
        crate::controlplane::tail(&self.dir.path().join("kubelet.log"))
    }

    pub fn containerd_log(&self) -> String {
        crate::controlplane::tail(&self.dir.path().join("containerd.log"))
    }

    /// The container logs the kubelet wrote for the pods of `namespace` whose name starts
    /// with `prefix` (its `<root>/logs/<namespace>_<pod>_<uid>/<container>/<restart>.log`),
    /// each headed by its path: a pod's logs without the API server's proxy to the kubelet.
    pub fn pod_logs(&self, namespace: &str, prefix: &str) -> anyhow::Result<String> {
        let root = self.dir.path().join("kubelet/logs");
        let mut files = Vec::new();
        for pod in fs::read_dir(&root).with_context(|| format!("reading {}", root.display()))? {
            let pod = pod?.path();
            let name = pod.file_name().unwrap_or_default().to_string_lossy();
            if !name.starts_with(&format!("{namespace}_{prefix}")) {
                continue;
            }
            for container in fs::read_dir(&pod)? {
                for log in fs::read_dir(container?.path())? {
                    files.push(log?.path());
                }
            }
        }
        files.sort();
        let mut out = String::new();
        for file in files {
            out += &format!("==> {} <==\n", file.display());
            out += &fs::read_to_string(&file).unwrap_or_default();
        }
        Ok(out)
    }

    /// Stops the kubelet, removes every pod (containerd stops the containers, tears down
    /// their network and unmounts them), stops containerd and removes what the node made on
    /// the host. Dropping the node does the same.
    pub fn stop(&mut self) {
        if let Some(mut kubelet) = self.kubelet.take() {
            kubelet.stop(Duration::from_secs(10));
        }
        if let Some(mut containerd) = self.containerd.take() {
            let out = Command::new(crate::controlplane::binary())
                .arg("remove-pods")
                .arg("--container-runtime-endpoint")
                .arg(format!("unix://{}", self.socket.display()))
                .stdin(Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!(
                    "node {}: removing its pods failed: {}",
                    self.name,
                    crate::cli::text(&o)
                ),
                Err(e) => eprintln!("node {}: cannot run remove-pods: {e}", self.name),
            }
            containerd.stop(Duration::from_secs(10));
        }
        if let Some(slot) = self.slot.take() {
            slot.release(self.dir.path(), false);
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Seconds since boot now (`/proc/uptime`), the clock of [`process_started`].
pub fn seconds_since_boot() -> anyhow::Result<f64> {
    let uptime = fs::read_to_string("/proc/uptime")?;
    Ok(uptime
        .split_whitespace()
        .next()
        .context("empty /proc/uptime")?
        .parse()?)
}

/// When process `pid` started, in seconds since boot (`/proc/<pid>/stat` field 22).
pub fn process_started(pid: u32) -> anyhow::Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count fields after its closing ')'.
    let after_name = stat.rsplit_once(')').context("malformed stat")?.1;
    let ticks: f64 = after_name
        .split_whitespace()
        .nth(19)
        .context("no starttime in stat")?
        .parse()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// A container's memory as the kernel reports it for its main process.
#[derive(Debug, Clone, Copy)]
pub struct ContainerMemory {
    pub pid: u32,
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
}

/// A numbered share of the host: bridge, nftables table, cgroup, lock file.
struct Slot {
    n: u32,
    cgroup_root: String,
    lock: PathBuf,
}

impl Slot {
    fn bridge(&self) -> String {
        format!("mcsched{}", self.n)
    }

    fn table(&self) -> String {
        format!("mcsched{}", self.n)
    }

    /// The first free slot (or one whose owner died, cleaned up first); its lock file
    /// records the owner's pid, the node's directory and its cgroup.
    fn claim(dir: &Path) -> anyhow::Result<Slot> {
        fs::create_dir_all(LOCK_DIR).with_context(|| format!("cannot create {LOCK_DIR}"))?;
        // With v1 hierarchies, inside the test's own (memory) cgroup, so the containers
        // count where the test does; with v2 alone, under the root, as cgroup v2 allows no
        // child cgroups with controllers beside the test's own processes.
        let base = if cgroup_v1() {
            own_cgroup()?
        } else {
            "/".to_string()
        };
        for n in 1..=SLOTS {
            let lock = Path::new(LOCK_DIR).join(format!("slot-{n}"));
            let cgroup_root = format!("{}/mcsched-e2e-{n}", base.trim_end_matches('/'));
            // A stale slot is cleaned up and then claimed: two tries.
            for _ in 0..2 {
                match fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&lock)
                {
                    Ok(mut f) => {
                        writeln!(
                            f,
                            "{}\n{}\n{}",
                            std::process::id(),
                            dir.display(),
                            cgroup_root
                        )?;
                        let slot = Slot {
                            n,
                            cgroup_root,
                            lock,
                        };
                        slot.clean_host();
                        slot.make_cgroups()?;
                        return Ok(slot);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        match Slot::stale(n, &lock) {
                            Some((stale, stale_dir)) => stale.release(&stale_dir, true),
                            None => break,
                        }
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("cannot create {}", lock.display()));
                    }
                }
            }
        }
        bail!("all {SLOTS} real-node slots in {LOCK_DIR} are taken")
    }

    /// The slot described by `lock` if the process that claimed it is gone.
    fn stale(n: u32, lock: &Path) -> Option<(Slot, PathBuf)> {
        let text = fs::read_to_string(lock).ok()?;
        let mut lines = text.lines();
        let pid: i32 = lines.next()?.parse().ok()?;
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            return None;
        }
        let dir = PathBuf::from(lines.next()?);
        let cgroup_root = lines.next()?.to_string();
        Some((
            Slot {
                n,
                cgroup_root,
                lock: lock.to_path_buf(),
            },
            dir,
        ))
    }

    /// Every v1 hierarchy (and the v2 one, on a unified host) gets the cgroup; cpuset
    /// children start with no CPUs in v1, so they inherit their parent's.
    fn make_cgroups(&self) -> anyhow::Result<()> {
        for mount in cgroup_mounts() {
            let mut path = mount.clone();
            for part in self.cgroup_root.split('/').filter(|p| !p.is_empty()) {
                let parent = path.clone();
                path.push(part);
                // The parents are shared: another test's node may create one between
                // the check and the create.
                match fs::create_dir(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("cannot create cgroup {}", path.display()));
                    }
                }
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let own = path.join(file);
                    if own.exists() && fs::read_to_string(&own).is_ok_and(|v| v.trim().is_empty()) {
                        let inherited = fs::read_to_string(parent.join(file))?;
                        fs::write(&own, inherited.trim())
                            .with_context(|| format!("cannot write {}", own.display()))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes what a node of this slot may have left on the host: processes still in its
    /// cgroups or serving its containerd socket, mounts under `dir`, the cgroups, the
    /// nftables table, the bridge, `dir` itself when `remove_dir` (a live node's TempDir
    /// removes itself) and the lock file.
    fn release(self, dir: &Path, remove_dir: bool) {
        let socket = dir.join("containerd.sock");
        kill_processes_mentioning(&socket.to_string_lossy());
        for mount in cgroup_mounts().into_iter().chain(unified_mount()) {
            remove_cgroup_tree(&mount.join(self.cgroup_root.trim_start_matches('/')));
        }
        unmount_under(dir);
        self.clean_host();
        if remove_dir {
            let _ = fs::remove_dir_all(dir);
        }
        let _ = fs::remove_file(&self.lock);
    }

    /// The host-side leftovers of the slot: network namespaces holding one of its pod
    /// addresses (a pod whose containerd died before removing it; deleting the namespace
    /// deletes its veth pair), the nftables table and the bridge.
    fn clean_host(&self) {
        let prefix = format!(" inet 10.89.{}.", self.n);
        for dir in ["/run/netns", "/var/run/netns"] {
            let Ok(entries) = fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if !name.starts_with("cni-") {
                    continue;
                }
                let ours = Command::new("ip")
                    .args(["-n", &name, "-4", "-o", "addr", "show"])
                    .stderr(Stdio::null())
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&prefix));
                if ours {
                    let _ = Command::new("ip")
                        .args(["netns", "delete", &name])
                        .stderr(Stdio::null())
                        .status();
                }
            }
        }
        let _ = Command::new("nft")
            .args(["delete", "table", "ip", &self.table()])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["link", "delete", &self.bridge()])
            .stderr(Stdio::null())
            .status();
    }
}

/// The test's own cgroup path in the v1 memory hierarchy (or the v2 one), "/" if none.
fn own_cgroup() -> anyhow::Result<String> {
    let text = fs::read_to_string("/proc/self/cgroup").context("cannot read /proc/self/cgroup")?;
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        match (controllers, path) {
            (Some(c), Some(p)) if c.split(',').any(|c| c == "memory") => return Ok(p.to_string()),
            (Some(""), Some(p)) => unified = Some(p.to_string()),
            _ => {}
        }
    }
    Ok(unified.unwrap_or_else(|| "/".to_string()))
}

/// Whether the host has cgroup v1 hierarchies (this machine kind has, with the v2 one
/// mounted beside them at /sys/fs/cgroup/unified).
fn cgroup_v1() -> bool {
    fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup"))
}

/// Mount points of the cgroup hierarchies: every v1 one, or the v2 one alone.
fn cgroup_mounts() -> Vec<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let (mut v1, mut v2) = (Vec::new(), Vec::new());
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 {
            continue;
        }
        match fields[2] {
            "cgroup" => v1.push(PathBuf::from(fields[1])),
            "cgroup2" => v2.push(PathBuf::from(fields[1])),
            _ => {}
        }
    }
    if v1.is_empty() { v2 } else { v1 }
}

/// The v2 hierarchy of a hybrid host (runc mirrors v1 cgroups there), if it is apart
/// from the ones [`cgroup_mounts`] lists.
fn unified_mount() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let unified = mounts.lines().find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        (fields.len() > 2 && fields[2] == "cgroup2").then(|| PathBuf::from(fields[1]))
    })?;
    (!cgroup_mounts().contains(&unified)).then_some(unified)
}

/// Kills every process in the cgroup tree at `path`, then removes the tree bottom-up.
fn remove_cgroup_tree(path: &Path) {
    if !path.is_dir() {
        return;
    }
    if let Ok(entries) = fs::read_dir(path) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    for _ in 0..50 {
        let procs = fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs.lines().filter_map(|p| p.parse().ok()).collect();
        if pids.is_empty() && fs::remove_dir(path).is_ok() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) on processes the node's cgroup holds (its containers).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = fs::remove_dir(path);
}

/// SIGKILL to every process whose command line mentions `needle` (a node's containerd
/// and its shims name its socket).
fn kill_processes_mentioning(needle: &str) {
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && pid != std::process::id() as i32 {
            // SAFETY: kill(2) on a leftover process of this harness's node.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Lazily unmounts every mount point under `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut points: Vec<String> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        // SAFETY: umount2 on a path string we own, NUL-terminated below.
        if let Ok(c) = std::ffi::CString::new(p) {
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            crate::cli::text(&out).trim()
        );
    }
    Ok(())
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&sbin_path())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// $PATH with the sbin directories (runc, ip and nft live there), which a user's PATH
/// may lack.
fn sbin_path() -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        if !dirs.iter().any(|x| x == Path::new(d)) {
            dirs.push(PathBuf::from(d));
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// Reads a child's piped stdout to its end, so it never blocks on a full pipe.
fn drain_stdout(process: &mut Guarded) {
    if let Some(stdout) = process.child_mut().and_then(|c| c.stdout.take()) {
        std::thread::spawn(move || for _ in BufReader::new(stdout).lines() {});
    }
}
