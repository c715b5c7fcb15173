//! mcsched's own upgrade, as an operator rolls it (`make test-upgrade`). An earlier
//! release — scripts/upgrade-from.sh exports revision `UPGRADE_FROM`, builds it in a
//! target of its own and packs its agent image; `MCSCHED_UPGRADE_FROM` names that build —
//! is installed with 2 replicas in containers on a real node, a leaf is joined, then the
//! install is upgraded to this build and rolled back, each a rolling update of the
//! Deployment (an old leader beside a new standby) while pods keep coming, to simulated
//! host nodes and to the leaf. Once by `kubectl mcsched install` (the earlier release's
//! CLI, then this one's, then the earlier one's again) and once by the Helm chart (`helm
//! install`, `helm upgrade`, `helm rollback`).
//!
//! Judged from the API servers: every pod bound exactly once (the host's audit log), each
//! binding sent by the agent pod that held the Lease then, none refused; every pod
//! Running, the leaf's from exactly one copy each, and every copy made before a roll the
//! same object after it; the aggregated API served by each release's leader; after the
//! rollback the install holds exactly the objects the earlier release renders.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::discovery::Scope;
use kube::{Api, Client};
use mcsched_e2e::real_node::{self, RealNode};
use mcsched_e2e::{ControlPlane, ControlPlaneOptions, api, audit, cli, objects, wait};
use mcsched_shared::{keys, manifests};
use serde_json::{Value, json};

/// Host nodes as API objects (the kubelet simulator runs their pods), tainted so that
/// kube-scheduler puts the agent's own pods on the real node only.
const HOST_NODES: usize = 20;
const LEAF_NODES: usize = 10;
const SIMULATED_TAINT: &str = "mcsched.test/simulated";
const POOL: &str = "simulated";
/// One pod every LOAD_PERIOD, alternately for the host and for the leaf.
const LOAD_PERIOD: Duration = Duration::from_millis(100);
/// Pods Running before the first roll, and how long the load runs between rolls.
const WARM_UP_PODS: usize = 40;
const BETWEEN_ROLLS: Duration = Duration::from_secs(20);
const ROLL_TIMEOUT: Duration = Duration::from_secs(240);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The installed configuration's leaderElection.leaseDuration (kube's default).
const LEASE_DURATION: Duration = Duration::from_secs(15);
const LEAF: &str = "leaf";
const HELM_RELEASE: &str = "mcsched";

/// One release of mcsched: its CLI, its agent image and its chart.
struct Release {
    name: String,
    cli: PathBuf,
    archive: PathBuf,
    image: String,
    chart: PathBuf,
}

impl Release {
    /// The earlier release `MCSCHED_UPGRADE_FROM` names (a directory
    /// scripts/upgrade-from.sh printed).
    fn earlier() -> anyhow::Result<Self> {
        let dir = std::env::var_os("MCSCHED_UPGRADE_FROM")
            .map(PathBuf::from)
            .context(
                "MCSCHED_UPGRADE_FROM must name the earlier release's build: `make test-upgrade` \
             sets it (scripts/upgrade-from.sh REV makes one)",
            )?;
        let src = dir.join("src");
        let reference = src.join(".build/image/mcsched-agent.ref");
        let image = std::fs::read_to_string(&reference)
            .with_context(|| format!("{} (run scripts/upgrade-from.sh)", reference.display()))?
            .trim()
            .to_string();
        let release = Release {
            name: format!(
                "earlier release {}",
                dir.file_name().unwrap_or_default().to_string_lossy()
            ),
            cli: src.join("target/debug/kubectl-mcsched"),
            archive: src.join(".build/image/mcsched-agent.tar"),
            image,
            chart: src.join("charts/mcsched"),
        };
        release.check()?;
        Ok(release)
    }

    /// This build: target/debug's CLI, `make image`'s image, charts/mcsched.
    fn this_build() -> anyhow::Result<Self> {
        let (archive, image) = real_node::agent_image()?;
        let release = Release {
            name: "this build".into(),
            cli: cli::binary(),
            archive,
            image,
            chart: mcsched_e2e::repo_root().join("charts/mcsched"),
        };
        release.check()?;
        Ok(release)
    }

    fn check(&self) -> anyhow::Result<()> {
        for f in [&self.cli, &self.archive, &self.chart] {
            anyhow::ensure!(f.exists(), "{}: {} is missing", self.name, f.display());
        }
        Ok(())
    }

    fn run(&self, kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.cli)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.cli.display()))?;
        anyhow::ensure!(
            out.status.success(),
            "{}: kubectl mcsched {}: {}",
            self.name,
            args.join(" "),
            cli::text(&out)
        );
        Ok(cli::text(&out))
    }

    /// The image as the chart's values: repository and tag.
    fn image_values(&self) -> anyhow::Result<[String; 4]> {
        let (repository, tag) = self
            .image
            .rsplit_once(':')
            .with_context(|| format!("image {} has no tag", self.image))?;
        Ok([
            "--set".into(),
            format!("image.repository={repository}"),
            "--set".into(),
            format!("image.tag={tag}"),
        ])
    }
}

/// How the operator installs and rolls mcsched.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tool {
    Cli,
    Helm,
}

/// `.build/helm` (`make helm`), with its cache, configuration and data in `home`.
fn helm(home: &Path, kubeconfig: &Path) -> anyhow::Result<Command> {
    let bin = mcsched_e2e::repo_root().join(".build/helm");
    anyhow::ensure!(bin.exists(), "{} is missing: `make helm`", bin.display());
    let mut cmd = Command::new(bin);
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", keys::SYSTEM_NAMESPACE])
        .stdin(Stdio::null());
    Ok(cmd)
}

fn helm_ok(mut cmd: Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running helm {what}"))?;
    anyhow::ensure!(out.status.success(), "helm {what}: {}", cli::text(&out));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installs `release` or rolls the install to it, 2 replicas, and waits until its
/// Deployment is rolled out.
fn roll_to(tool: Tool, release: &Release, host: &ControlPlane, home: &Path) -> anyhow::Result<()> {
    match tool {
        Tool::Cli => {
            release.run(
                &host.kubeconfig,
                &[
                    "install",
                    "--image",
                    &release.image,
                    "--replicas",
                    "2",
                    "--wait",
                    "--timeout",
                    "240s",
                    "--yes",
                ],
            )?;
        }
        Tool::Helm => {
            // Helm keeps its release in the namespace: it creates it, the chart does not.
            let mut cmd = helm(home, &host.kubeconfig)?;
            cmd.arg("upgrade")
                .arg("--install")
                .arg(HELM_RELEASE)
                .arg(&release.chart)
                .args(["--create-namespace", "--set", "namespace.create=false"])
                .args(["--set", "replicas=2"])
                .args(release.image_values()?)
                .args(["--wait", "--timeout", "240s"]);
            helm_ok(cmd, "upgrade --install")?;
        }
    }
    Ok(())
}

/// `helm rollback` to revision 1, the earlier release's.
fn helm_rollback(host: &ControlPlane, home: &Path) -> anyhow::Result<()> {
    let mut cmd = helm(home, &host.kubeconfig)?;
    cmd.args(["rollback", HELM_RELEASE, "1", "--wait", "--timeout", "240s"]);
    helm_ok(cmd, "rollback")?;
    Ok(())
}

fn load_pod(i: usize) -> serde_json::Value {
    let mut p = json!({
        "metadata": {"name": format!("u{i:05}"), "namespace": "default"},
        "spec": {
            "schedulerName": keys::DEFAULT_SCHEDULER_NAME,
            "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "100m"}}}],
            "terminationGracePeriodSeconds": 0,
        },
    });
    if i.is_multiple_of(2) {
        p["spec"]["nodeSelector"] = json!({"pool": POOL});
        p["spec"]["tolerations"] = json!([{"key": SIMULATED_TAINT, "operator": "Exists"}]);
    } else {
        p["spec"]["nodeSelector"] = json!({(keys::CLUSTER_LABEL): LEAF});
    }
    p
}

/// Pods created one per LOAD_PERIOD until stopped; the task answers how many.
struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<usize>>,
}

impl Load {
    fn start(client: Client) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, "default");
            let mut i = 0;
            let mut tick = tokio::time::interval(LOAD_PERIOD);
            while !stopped.load(Ordering::Relaxed) {
                tick.tick().await;
                let pod: Pod = serde_json::from_value(load_pod(i))?;
                pods.create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("creating pod u{i:05}"))?;
                i += 1;
            }
            Ok(i)
        });
        Load { stop, task }
    }

    async fn finish(self) -> anyhow::Result<usize> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await?
    }
}

async fn nodes(host: &Client, leaf: &Client) -> anyhow::Result<()> {
    for i in 0..HOST_NODES {
        objects::create_node(
            host,
            json!({
                "metadata": {"name": format!("h{i}"), "labels": {"pool": POOL,
                    "kubernetes.io/hostname": format!("h{i}")}},
                "spec": {"taints": [{"key": SIMULATED_TAINT, "effect": "NoSchedule"}]},
                "status": {
                    "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                    "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]
                }
            }),
        )
        .await?;
    }
    for i in 0..LEAF_NODES {
        objects::ready_node(leaf, &format!("l{i}"), "64", "256Gi", json!({})).await?;
    }
    Ok(())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn image_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.containers.first()?.image.as_deref()
}

fn restarts(pod: &Pod) -> i32 {
    (pod.status.as_ref())
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

/// The agent Lease: its name and holder identity (`<pod>_<random>`).
async fn agent_lease(host: &Client) -> anyhow::Result<Option<(String, String)>> {
    let leases: Api<Lease> = Api::namespaced(host.clone(), keys::SYSTEM_NAMESPACE);
    for lease in leases.list(&ListParams::default()).await?.items {
        if let Some(holder) = lease.spec.and_then(|s| s.holder_identity)
            && holder.starts_with(keys::AGENT_NAME)
        {
            return Ok(Some((lease.metadata.name.unwrap_or_default(), holder)));
        }
    }
    Ok(None)
}

/// Waits until every agent pod runs `release`'s image, Ready, and one of them leads;
/// returns the leader's pod name.
async fn rolled_out(host: &ControlPlane, release: &Release) -> anyhow::Result<String> {
    let agents: Api<Pod> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    let selector = format!("app.kubernetes.io/name={}", keys::AGENT_NAME);
    let leader = wait::until(
        ROLL_TIMEOUT,
        &format!("two agent pods of {} Ready, one leading", release.name),
        || {
            let agents = agents.clone();
            let selector = selector.clone();
            async move {
                let pods = agents
                    .list(&ListParams::default().labels(&selector))
                    .await?
                    .items;
                let current = pods.len() == 2
                    && pods.iter().all(|p| {
                        image_of(p) == Some(release.image.as_str())
                            && is_ready(p)
                            && p.metadata.deletion_timestamp.is_none()
                    });
                let Some((_, holder)) = agent_lease(&host.client).await? else {
                    return Ok(None);
                };
                let leader = pods
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .find(|n| holder.starts_with(&format!("{n}_")));
                Ok(current.then_some(leader).flatten())
            }
        },
    )
    .await?;
    for p in agents
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        anyhow::ensure!(
            restarts(&p) == 0,
            "{} agent pod {:?} restarted: {:?}",
            release.name,
            p.metadata.name,
            p.status.as_ref().and_then(|s| s.container_statuses.clone())
        );
    }
    // The leader publishes itself as the aggregated API's one backend.
    let leader_ip = (agents.get(&leader).await?.status)
        .and_then(|s| s.pod_ip)
        .context("the leader has no pod IP")?;
    let slices: Api<EndpointSlice> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    wait::until(
        Duration::from_secs(60),
        &format!(
            "{}: the API's EndpointSlice naming the leader {leader} ({leader_ip})",
            release.name
        ),
        || async {
            let Some(slice) = slices.get_opt(keys::API_SERVICE).await? else {
                return Ok(None);
            };
            let addresses: Vec<String> = (slice.endpoints.iter().flatten())
                .flat_map(|e| e.addresses.clone())
                .collect();
            Ok((addresses == [leader_ip.clone()]).then_some(()))
        },
    )
    .await?;
    api::wait_available(&host.client, Duration::from_secs(120))
        .await
        .with_context(|| format!("{}: the aggregated API", release.name))?;
    Ok(leader)
}

/// What a roll went through, sampled every 200 ms while it ran.
#[derive(Debug, Default)]
struct Overlap {
    samples: usize,
    /// Samples with Ready agent pods of both images: the two releases side by side.
    side_by_side: usize,
    /// Of those, samples where a pod of the image rolled away from led: the old leader
    /// beside a new standby.
    old_leader_beside_new: usize,
    /// The image of each Lease holder seen, in order, repeats left out.
    leaders: Vec<String>,
}

/// Samples the agent pods and the Lease from `start` until `stop`.
struct Sampler {
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<Overlap>>,
}

impl Sampler {
    async fn stop(self) -> anyhow::Result<Overlap> {
        self.done.store(true, Ordering::Relaxed);
        self.task.await?
    }
}

fn start_sampling(host: &Client, from_image: &str, to_image: &str) -> Sampler {
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (host, from, to, done) = (
            host.clone(),
            from_image.to_string(),
            to_image.to_string(),
            done.clone(),
        );
        tokio::spawn(async move {
            let agents: Api<Pod> = Api::namespaced(host.clone(), keys::SYSTEM_NAMESPACE);
            let selector = format!("app.kubernetes.io/name={}", keys::AGENT_NAME);
            let mut overlap = Overlap::default();
            while !done.load(Ordering::Relaxed) {
                let pods = agents
                    .list(&ListParams::default().labels(&selector))
                    .await?
                    .items;
                let holder = agent_lease(&host).await?.map(|(_, h)| h);
                let ready = |image: &str| -> Vec<String> {
                    pods.iter()
                        .filter(|p| image_of(p) == Some(image) && is_ready(p))
                        .filter_map(|p| p.metadata.name.clone())
                        .collect()
                };
                let (old, new) = (ready(&from), ready(&to));
                let leads = |names: &[String]| {
                    holder
                        .as_ref()
                        .is_some_and(|h| names.iter().any(|n| h.starts_with(&format!("{n}_"))))
                };
                overlap.samples += 1;
                if !old.is_empty() && !new.is_empty() {
                    overlap.side_by_side += 1;
                    if leads(&old) {
                        overlap.old_leader_beside_new += 1;
                    }
                }
                let leader = if leads(&old) {
                    Some(&from)
                } else if leads(&new) {
                    Some(&to)
                } else {
                    None
                };
                if let Some(image) = leader
                    && overlap.leaders.last() != Some(image)
                {
                    overlap.leaders.push(image.clone());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            anyhow::Ok(overlap)
        })
    };
    Sampler {
        done,
        task: sampler,
    }
}

/// A roll from `from` to `to` ran both side by side, and the Lease went from a pod of
/// `from` to one of `to`.
fn side_by_side(o: &Overlap, from: &Release, to: &Release) -> anyhow::Result<()> {
    anyhow::ensure!(
        o.side_by_side > 0,
        "rolling from {} to {}: never a Ready agent pod of each at once: {o:?}",
        from.name,
        to.name
    );
    anyhow::ensure!(
        o.leaders.first() == Some(&from.image) && o.leaders.last() == Some(&to.image),
        "rolling from {} to {}: the Lease's holders were of {:?}",
        from.name,
        to.name,
        o.leaders
    );
    Ok(())
}

/// The leaf's copies: host pod UID → the copy's UID.
async fn copies(leaf: &Client) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let pods: Api<Pod> = Api::namespaced(leaf.clone(), "default");
    for p in pods.list(&ListParams::default()).await?.items {
        if let Some(host_uid) =
            (p.metadata.annotations.as_ref()).and_then(|a| a.get(keys::HOST_POD_UID_ANNOTATION))
        {
            anyhow::ensure!(
                out.insert(host_uid.clone(), p.metadata.uid.clone().unwrap_or_default())
                    .is_none(),
                "host pod {host_uid} has two copies in the leaf"
            );
        }
    }
    Ok(out)
}

/// Every copy of `before` is still the same object in `after` (a copy deleted and made
/// again, or taken over, would have another UID).
fn copies_kept(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    roll: &str,
) -> anyhow::Result<()> {
    let mut changed = Vec::new();
    for (host_uid, copy_uid) in before {
        match after.get(host_uid) {
            Some(u) if u == copy_uid => {}
            Some(u) => changed.push(format!("{host_uid}: copy {copy_uid} became {u}")),
            None => changed.push(format!("{host_uid}: copy {copy_uid} gone")),
        }
    }
    anyhow::ensure!(
        changed.is_empty(),
        "{} of {} leaf copies not kept across {roll}: {}",
        changed.len(),
        before.len(),
        changed.join(", ")
    );
    Ok(())
}

/// Waits until `want` load pods exist, all Running, those for the leaf from exactly one
/// copy each; returns them.
async fn settled(host: &Client, leaf: &Client, want: usize) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(host.clone(), "default");
    let virtual_node = keys::virtual_node_name(LEAF);
    let last = std::sync::Mutex::new(String::new());
    let result = wait::until(SETTLE_TIMEOUT, "every load pod Running", || async {
        let list = pods.list(&ListParams::default()).await?.items;
        let running = list
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        *last.lock().unwrap_or_else(|p| p.into_inner()) =
            format!("{running} of {} Running, {want} created", list.len());
        Ok((list.len() == want && running == want).then_some(list))
    })
    .await;
    let list = result.map_err(|e| {
        let last = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        e.context(last)
    })?;
    let copies = copies(leaf).await?;
    let mut on_leaf = 0;
    for (i, p) in list.iter().enumerate() {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let name = p.metadata.name.clone().unwrap_or_default();
        let for_leaf = name
            .trim_start_matches('u')
            .parse::<usize>()
            .map_or(i % 2 == 1, |n| n % 2 == 1);
        if for_leaf {
            anyhow::ensure!(
                node.as_deref() == Some(virtual_node.as_str()),
                "{name} for the leaf is on {node:?}"
            );
            let uid = p.metadata.uid.clone().unwrap_or_default();
            anyhow::ensure!(copies.contains_key(&uid), "{name} has no copy in the leaf");
            on_leaf += 1;
        } else {
            anyhow::ensure!(
                node.as_deref().is_some_and(|n| n.starts_with('h')),
                "{name} for the host is on {node:?}"
            );
        }
    }
    anyhow::ensure!(
        copies.len() == on_leaf,
        "the leaf holds {} copies for {on_leaf} pods: copies of pods the host does not have there",
        copies.len()
    );
    Ok(list)
}

/// From the host's audit log: every load pod bound by exactly one successful binding,
/// none refused, each sent by the agent pod whose Lease write was the last before it, less
/// than a lease duration before. Returns the bindings, the Lease holders seen and the
/// longest pause between two bindings.
fn bound_once_by_the_leader(
    audit_log: &Path,
    lease_name: &str,
    pods: &[Pod],
) -> anyhow::Result<(usize, BTreeSet<String>, Duration)> {
    let writes = audit::writes(audit_log)?;
    let agent = format!(
        "system:serviceaccount:{}:{}",
        keys::SYSTEM_NAMESPACE,
        keys::AGENT_NAME
    );
    let leases: Vec<(String, k8s_openapi::jiff::Timestamp)> = writes
        .iter()
        .filter(|w| {
            w.resource == "leases"
                && w.namespace == keys::SYSTEM_NAMESPACE
                && w.name == lease_name
                && matches!(w.verb.as_str(), "create" | "update" | "patch")
                && w.succeeded()
        })
        .map(|w| (w.pod_name.clone(), w.completed))
        .collect();
    anyhow::ensure!(
        !leases.is_empty(),
        "no write of Lease {lease_name} in the audit log"
    );
    let holders: BTreeSet<String> = leases.iter().map(|(p, _)| p.clone()).collect();
    let mut problems = Vec::new();
    let mut ok: HashMap<String, usize> = HashMap::new();
    let mut longest_pause = Duration::ZERO;
    let mut last: Option<k8s_openapi::jiff::Timestamp> = None;
    for w in writes
        .iter()
        .filter(|w| w.resource == "pods" && w.subresource == "binding" && w.verb == "create")
        .filter(|w| w.name.starts_with('u'))
    {
        if !w.succeeded() {
            problems.push(format!("refused: {w} ({})", w.message));
            continue;
        }
        if w.user != agent || w.pod_name.is_empty() {
            problems.push(format!("not from an agent pod's own token: {w}"));
        } else if !audit::held_at(&leases, &w.pod_name, w.received, LEASE_DURATION) {
            problems.push(format!("sent by {} without the Lease: {w}", w.pod_name));
        }
        *ok.entry(w.name.clone()).or_default() += 1;
        if let Some(last) = last
            && let Ok(pause) = Duration::try_from(w.received.duration_since(last))
        {
            longest_pause = longest_pause.max(pause);
        }
        last = Some(w.received);
    }
    for p in pods {
        let name = p.metadata.name.clone().unwrap_or_default();
        match ok.get(&name).copied().unwrap_or(0) {
            1 => {}
            n => problems.push(format!("{name}: {n} successful bindings")),
        }
    }
    if !problems.is_empty() {
        let kept = audit::keep(audit_log, "upgrade")?;
        bail!(
            "{} problems with the bindings (audit log kept at {}): {}",
            problems.len(),
            kept.display(),
            problems
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok((ok.values().sum(), holders, longest_pause))
}

/// `(apiVersion, kind, namespace, name)` of each object in a multi-document YAML.
fn rendered(yaml: &str) -> anyhow::Result<BTreeSet<(String, String, String, String)>> {
    let docs: Vec<Value> = mcsched_shared::yaml::from_multiple(yaml)?;
    Ok(docs
        .into_iter()
        .filter(|d| d.is_object())
        .map(|d| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&d["apiVersion"]),
                s(&d["kind"]),
                s(&d["metadata"]["namespace"]),
                s(&d["metadata"]["name"]),
            )
        })
        .collect())
}

/// What the cluster holds with the install label, among the kinds of `kinds`.
async fn installed(
    client: &Client,
    kinds: &BTreeSet<(String, String)>,
) -> anyhow::Result<BTreeSet<(String, String, String, String)>> {
    let selector = manifests::install_selector(keys::SYSTEM_NAMESPACE);
    let mut out = BTreeSet::new();
    for (api_version, kind) in kinds {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("discovering {api_version} {kind}"))?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        for o in api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            if o.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let namespace = match caps.scope {
                Scope::Namespaced => o.metadata.namespace.clone().unwrap_or_default(),
                Scope::Cluster => String::new(),
            };
            out.insert((
                api_version.clone(),
                kind.clone(),
                namespace,
                o.metadata.name.clone().unwrap_or_default(),
            ));
        }
    }
    Ok(out)
}

/// What `release` renders for this install: the CLI's dry run, or Helm's manifest of the
/// release's current revision.
fn renders(
    tool: Tool,
    release: &Release,
    host: &ControlPlane,
    home: &Path,
) -> anyhow::Result<BTreeSet<(String, String, String, String)>> {
    let yaml = match tool {
        Tool::Cli => {
            let out = Command::new(&release.cli)
                .arg("--kubeconfig")
                .arg(&host.kubeconfig)
                .args(["install", "--image", &release.image, "--replicas", "2"])
                .args(["--dry-run=client", "-o", "yaml"])
                .stdin(Stdio::null())
                .output()?;
            anyhow::ensure!(out.status.success(), "{}", cli::text(&out));
            String::from_utf8(out.stdout)?
        }
        Tool::Helm => {
            let mut cmd = helm(home, &host.kubeconfig)?;
            cmd.args(["get", "manifest", HELM_RELEASE]);
            helm_ok(cmd, "get manifest")?
        }
    };
    let mut objects = rendered(&yaml)?;
    // The chart leaves the Namespace to Helm (--create-namespace), unlabelled.
    if tool == Tool::Helm {
        objects.retain(|(_, kind, _, _)| kind != "Namespace");
    }
    Ok(objects)
}

async fn explain(release: &Release, host: &ControlPlane, pod: &str) -> anyhow::Result<()> {
    let text = release
        .run(&host.kubeconfig, &["explain", "pod", pod])
        .with_context(|| format!("{} explaining {pod} through its leader", release.name))?;
    anyhow::ensure!(
        text.contains(pod),
        "{}: explain pod {pod} does not name it: {text}",
        release.name
    );
    Ok(())
}

/// The newest load pod bound, once one created after `since` is.
async fn newest_bound(host: &Client, since: usize) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(host.clone(), "default");
    wait::until(
        Duration::from_secs(60),
        &format!("a load pod after u{since:05} bound"),
        || async {
            let mut bound: Vec<String> = (pods.list(&ListParams::default()).await?.items)
                .into_iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .filter_map(|p| p.metadata.name)
                .filter(|n| {
                    n.trim_start_matches('u')
                        .parse::<usize>()
                        .is_ok_and(|i| i > since)
                })
                .collect();
            bound.sort();
            Ok(bound.pop())
        },
    )
    .await
}

async fn load_pods_created(host: &Client) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(host.clone(), "default");
    Ok(pods.list(&ListParams::default()).await?.items.len())
}

async fn upgrade_and_roll_back(tool: Tool) -> anyhow::Result<()> {
    let started = Instant::now();
    let earlier = Release::earlier()?;
    let this = Release::this_build()?;
    let step = |what: &str| {
        eprintln!(
            "[{:>5.1}s] {tool:?}: {what}",
            started.elapsed().as_secs_f64()
        )
    };
    let address = api::routable_address()?;
    let name = format!("upgrade-{}", format!("{tool:?}").to_lowercase());
    let leaf_name = format!("{name}-leaf");
    let leaf_args = ["--bind-address", address.as_str()];
    let (host, leaf) = tokio::try_join!(
        real_node::control_plane_with(&name, true, &["--audit-log", "audit.log"]),
        ControlPlane::start_with_args(&leaf_name, ControlPlaneOptions::full(), &leaf_args,)
    )?;
    let node = RealNode::start(&host, "agents").await?;
    node.import(&earlier.archive)?;
    node.import(&this.archive)?;
    nodes(&host.client, &leaf.client).await?;
    real_node::wait_default_service_account(&host, "default").await?;
    let home = tempfile::tempdir()?;
    step(&format!(
        "clusters up; installing {} ({})",
        earlier.name, earlier.image
    ));

    roll_to(tool, &earlier, &host, home.path())?;
    let first_leader = rolled_out(&host, &earlier).await?;
    earlier.run(
        &host.kubeconfig,
        &[
            "join",
            "cluster",
            "--name",
            LEAF,
            "--cluster-kubeconfig",
            &leaf.kubeconfig.to_string_lossy(),
            "--namespaces",
            "default",
        ],
    )?;
    let load = Load::start(host.client.clone());
    let warm = wait::until(
        Duration::from_secs(120),
        &format!("{WARM_UP_PODS} load pods Running, half in the leaf"),
        || async {
            let copies = copies(&leaf.client).await?;
            let pods: Api<Pod> = Api::namespaced(host.client.clone(), "default");
            let running = (pods.list(&ListParams::default()).await?.items)
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok((running >= WARM_UP_PODS && copies.len() >= WARM_UP_PODS / 2).then_some(copies))
        },
    )
    .await;
    let warm = match warm {
        Ok(w) => w,
        Err(e) => {
            load.finish().await.ok();
            return Err(e);
        }
    };
    let created = load_pods_created(&host.client).await?;
    explain(&earlier, &host, &newest_bound(&host.client, 0).await?).await?;
    step(&format!(
        "{} leads; {} copies in the leaf; upgrading to {} ({})",
        first_leader,
        warm.len(),
        this.name,
        this.image
    ));

    // Sampled until the new leader leads: the old one may hold the Lease while it
    // terminates, after its Deployment counts the roll done.
    let sampler = start_sampling(&host.client, &earlier.image, &this.image);
    tokio::task::block_in_place(|| roll_to(tool, &this, &host, home.path()))?;
    let second_leader = rolled_out(&host, &this).await?;
    let upgrade = sampler.stop().await?;
    side_by_side(&upgrade, &earlier, &this)?;
    copies_kept(&warm, &copies(&leaf.client).await?, "the upgrade")?;
    explain(&this, &host, &newest_bound(&host.client, created).await?).await?;
    step(&format!(
        "upgraded: {second_leader} leads; both releases Ready in {} of {} samples, the earlier one leading in {}",
        upgrade.side_by_side, upgrade.samples, upgrade.old_leader_beside_new
    ));
    tokio::time::sleep(BETWEEN_ROLLS).await;

    let before_rollback = copies(&leaf.client).await?;
    let created = load_pods_created(&host.client).await?;
    step(&format!(
        "{} copies in the leaf; rolling back to {}",
        before_rollback.len(),
        earlier.name
    ));
    let sampler = start_sampling(&host.client, &this.image, &earlier.image);
    tokio::task::block_in_place(|| match tool {
        Tool::Cli => roll_to(tool, &earlier, &host, home.path()),
        Tool::Helm => helm_rollback(&host, home.path()),
    })?;
    let third_leader = rolled_out(&host, &earlier).await?;
    let rollback = sampler.stop().await?;
    side_by_side(&rollback, &this, &earlier)?;
    copies_kept(
        &before_rollback,
        &copies(&leaf.client).await?,
        "the rollback",
    )?;
    explain(&earlier, &host, &newest_bound(&host.client, created).await?).await?;
    step(&format!(
        "rolled back: {third_leader} leads; both releases Ready in {} of {} samples, this build leading in {}",
        rollback.side_by_side, rollback.samples, rollback.old_leader_beside_new
    ));
    tokio::time::sleep(BETWEEN_ROLLS).await;

    let created = load.finish().await?;
    let pods = settled(&host.client, &leaf.client, created).await?;
    copies_kept(&warm, &copies(&leaf.client).await?, "both rolls")?;
    let (lease_name, _) = agent_lease(&host.client).await?.context("no agent Lease")?;
    let (bindings, holders, longest_pause) =
        bound_once_by_the_leader(&host.data_dir().join("audit.log"), &lease_name, &pods)?;
    anyhow::ensure!(
        holders.len() >= 3,
        "the Lease passed between fewer than 3 agent pods over two rolls: {holders:?}"
    );

    // After the rollback the install is the earlier release's, nothing of this build's
    // left beside it.
    let want = renders(tool, &earlier, &host, home.path())?;
    let newer = renders(Tool::Cli, &this, &host, home.path())?;
    let kinds: BTreeSet<(String, String)> = want
        .iter()
        .chain(&newer)
        .map(|(v, k, _, _)| (v.clone(), k.clone()))
        .collect();
    let live = installed(&host.client, &kinds).await?;
    let orphans: Vec<_> = live.difference(&want).collect();
    let missing: Vec<_> = want.difference(&live).collect();
    anyhow::ensure!(
        orphans.is_empty() && missing.is_empty(),
        "after the rollback the install is not the earlier release's: left over {orphans:?}, missing {missing:?}"
    );
    let deployments: Api<Deployment> = Api::namespaced(host.client.clone(), keys::SYSTEM_NAMESPACE);
    let d = deployments.get(keys::AGENT_NAME).await?;
    anyhow::ensure!(
        d.spec.replicas == Some(2),
        "the Deployment's replicas after the rollback: {:?}",
        d.spec.replicas
    );
    step(&format!(
        "{created} pods, {bindings} bindings, each once by the Lease holder (longest pause between two: {longest_pause:?}); Lease held by {holders:?}; {} copies kept across both rolls; the install is the earlier release's {} objects",
        warm.len(),
        want.len()
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "make test-upgrade: needs the earlier release's build (MCSCHED_UPGRADE_FROM) and a real node"]
async fn install_upgrades_and_rolls_back_under_load() -> anyhow::Result<()> {
    upgrade_and_roll_back(Tool::Cli).await
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "make test-upgrade: needs the earlier release's build (MCSCHED_UPGRADE_FROM) and a real node"]
async fn helm_upgrades_and_rolls_back_under_load() -> anyhow::Result<()> {
    upgrade_and_roll_back(Tool::Helm).await
}
