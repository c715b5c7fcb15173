//! Kubernetes' own scheduling end-to-end suite (`k8s.io/kubernetes/test/e2e/scheduling`,
//! built by `make conformance-suite` from tests/conformance into .build/conformance.test),
//! run twice, side by side, on two clusters of the same shape: a control plane with
//! kube-controller-manager and simulated kubelets (the real node beside them where this
//! machine can run one, in the full run), whose default scheduler is (a) kube-scheduler,
//! (b) mcsched-agent with a profile named `default-scheduler` and kube-scheduler off —
//! installed by `kubectl mcsched install` into a container on the real node when there is
//! one, else its debug build on the host. Every spec that passes with kube-scheduler must
//! pass with mcsched.
//!
//! By default the quick subset runs (the `[Conformance]` specs but the one that waits 5
//! minutes by design, what `make test` runs);
//! `MCSCHED_CONFORMANCE=full` (what `make conformance` sets) runs every spec of the suite
//! and writes tests/conformance/results.md. `MCSCHED_CONFORMANCE_FOCUS` /
//! `MCSCHED_CONFORMANCE_SKIP` narrow a run by ginkgo regular expressions.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Binding, Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use mcsched_e2e::controlplane::{DEFAULT_MINOR, workload_feature_gates};
use mcsched_e2e::objects::create_node;
use mcsched_e2e::real_node::{self, RealNode};
use mcsched_e2e::{Agent, ControlPlane, ControlPlaneOptions, cli, repo_root, wait};
use mcsched_shared::keys;

/// What `make test` runs: the suite's `[Conformance]` specs but one, ...
const QUICK_FOCUS: &str = r"\[Conformance\]";
/// ... the hostPort spec whose second pod must stay Pending: it waits the framework's whole
/// pod start timeout (5 minutes, a constant) for it, with any scheduler. `make conformance`
/// runs it.
const QUICK_SKIP: &str = "same hostPort and protocol but one using 0.0.0.0 hostIP";
/// Simulated nodes of every run: the suite's specs want two or more (spreading, hostPort
/// conflicts across nodes), and a zone each for the Multi-AZ specs.
const NODES: usize = 3;
const SUITE_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scheduler {
    Kube,
    Mcsched,
}

impl Scheduler {
    fn name(self) -> &'static str {
        match self {
            Scheduler::Kube => "kube-scheduler",
            Scheduler::Mcsched => "mcsched",
        }
    }
}

/// One spec's outcome in one run.
#[derive(Clone, Debug)]
struct Outcome {
    state: String,
    message: String,
    seconds: f64,
}

/// One run of the suite: each spec's outcome, by its full name, and how long it took.
struct Run {
    specs: BTreeMap<String, Outcome>,
    duration: Duration,
    command: String,
    real_node: bool,
}

/// The ginkgo suite binary: `$MCSCHED_CONFORMANCE_SUITE`, else what `make
/// conformance-suite` built.
fn suite_binary() -> PathBuf {
    std::env::var_os("MCSCHED_CONFORMANCE_SUITE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".build/conformance.test"))
}

/// A node as a kubelet registers one: hostname, OS and architecture labels, a zone and
/// region (the Multi-AZ specs spread over them), an InternalIP (the hostPort specs pin a
/// pod's hostIP to it), cpu, memory, ephemeral storage and pods allocatable.
fn node(i: usize) -> serde_json::Value {
    let name = format!("node-{i}");
    serde_json::json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/region": "region-1",
            "topology.kubernetes.io/zone": format!("zone-{i}"),
        }},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "20Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "20Gi", "pods": "110"},
            "addresses": [
                {"type": "InternalIP", "address": format!("10.88.0.{}", 10 + i)},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux",
                "kubeletVersion": "v1.36.3", "containerRuntimeVersion": "simulated://1",
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                "osImage": "", "kubeProxyVersion": ""
            }
        }
    })
}

/// The suite's image override (`KUBE_TEST_REPO_LIST`, test/utils/image): every registry
/// its specs name images from becomes `mcsched.test/e2e`, a domain that never resolves.
/// Nothing is ever pulled: a simulated kubelet runs no containers, and the real node has
/// the images it runs imported from local builds (`scripts/image.sh conformance`).
/// `invalidRegistry` stays invalid, as the specs that test failed pulls want it.
const E2E_REGISTRY: &str = "mcsched.test/e2e";
const REPO_LIST_KEYS: &[&str] = &[
    "promoterE2eRegistry",
    "buildImageRegistry",
    "gcEtcdRegistry",
    "gcRegistry",
    "sigStorageRegistry",
    "privateRegistry",
    "dockerLibraryRegistry",
    "cloudProviderGcpRegistry",
];

/// The agent's configuration: one profile, `default-scheduler`, as kube-scheduler's.
const AGENT_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  qps: 500
  burst: 1000
profiles:
- schedulerName: default-scheduler
";

/// The installed agent's configuration: as [`AGENT_CONFIG`], with leader election on a
/// Lease in the install namespace, where `install` lets the agent hold one.
const INSTALLED_AGENT_CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: true
  resourceNamespace: mcsched-system
  resourceName: mcsched
profiles:
- schedulerName: default-scheduler
";

/// `mcsched-agent --config` on the host, leading before the suite starts.
async fn host_agent(cp: &ControlPlane) -> anyhow::Result<Agent> {
    let config = cp.dir().join("agent-config.yaml");
    std::fs::write(&config, AGENT_CONFIG)?;
    let config_arg = format!("--config={}", config.display());
    let agent = Agent::start_with(
        &cp.kubeconfig,
        "default-scheduler",
        cp.dir(),
        "conformance",
        &[&config_arg],
    )?;
    wait::until(Duration::from_secs(60), "the agent to lead", || async {
        Ok(agent.logs().contains("became leader").then_some(()))
    })
    .await
    .with_context(|| format!("agent log:\n{}", agent.logs()))?;
    Ok(agent)
}

/// `kubectl mcsched install --image <make image's image> --config <one profile,
/// default-scheduler> --node-selector <the real node>` onto the real node, its image
/// imported there; returns once the agent's pod is Ready and holds the Lease.
///
/// Nothing schedules the agent's own pod: kube-scheduler is off, and the agent is the
/// cluster's scheduler only once it runs. The harness binds it to the real node, as a
/// kubeadm cluster's kubelet runs its scheduler from a static pod that no scheduler places.
async fn install_agent(cp: &ControlPlane, node: &RealNode) -> anyhow::Result<()> {
    let started = Instant::now();
    let (archive, image) = real_node::agent_image()?;
    node.import(&archive)?;
    let config = cp.dir().join("agent-config.yaml");
    std::fs::write(&config, INSTALLED_AGENT_CONFIG)?;
    let node_selector = format!("kubernetes.io/hostname={}", node.name);
    let config_arg = config.display().to_string();
    let out = cli::run(
        &cp.kubeconfig,
        &[
            "install",
            "--image",
            &image,
            "--config",
            &config_arg,
            "--node-selector",
            &node_selector,
            "--yes",
        ],
    )?;
    if !out.status.success() {
        bail!("kubectl mcsched install failed: {}", cli::text(&out));
    }
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), keys::SYSTEM_NAMESPACE);
    let selector = format!("app.kubernetes.io/name={}", keys::AGENT_NAME);
    let name = wait::until(Duration::from_secs(60), "the agent's pod", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            Ok(list.items.into_iter().find_map(|p| {
                let unbound = p.spec.as_ref().is_none_or(|s| s.node_name.is_none());
                unbound.then(|| p.metadata.name.unwrap_or_default())
            }))
        }
    })
    .await?;
    let binding: Binding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": keys::SYSTEM_NAMESPACE},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node.name},
    }))?;
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        &name,
        &PostParams::default(),
        &binding,
    )
    .await?;
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), keys::SYSTEM_NAMESPACE);
    wait::until(
        Duration::from_secs(180),
        "the installed agent Ready and leading",
        || {
            let (pods, leases, name) = (pods.clone(), leases.clone(), name.clone());
            async move {
                let ready = pods.get(&name).await?.status.is_some_and(|s| {
                    s.conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                // The holder identity is `<hostname>_<random>`; a pod's hostname is its name.
                let leading = leases
                    .get_opt("mcsched")
                    .await?
                    .and_then(|l| l.spec?.holder_identity)
                    .is_some_and(|h| h.starts_with(&format!("{name}_")));
                Ok((ready && leading).then_some(()))
            }
        },
    )
    .await
    .with_context(|| {
        format!(
            "agent log:\n{}\nkubelet:\n{}",
            node.pod_logs(keys::SYSTEM_NAMESPACE, keys::AGENT_NAME)
                .unwrap_or_else(|e| e.to_string()),
            node.kubelet_log()
        )
    })?;
    eprintln!(
        "mcsched: agent imported, installed, Ready and leading on {} in {:.1?}",
        node.name,
        started.elapsed()
    );
    Ok(())
}

async fn run_suite(
    scheduler: Scheduler,
    focus: &str,
    skip: &str,
    with_real_node: bool,
) -> anyhow::Result<Run> {
    let suite = suite_binary();
    if !suite.exists() {
        bail!(
            "{} does not exist: build it with `make conformance-suite`",
            suite.display()
        );
    }
    let options = ControlPlaneOptions {
        with_controller_manager: true,
        with_scheduler: scheduler == Scheduler::Kube,
        simulate_kubelets: true,
    };
    let name = format!("conformance-{}", scheduler.name());
    // With a real node, the API server serves on an address its pods reach and gives
    // pods their ServiceAccount token, as in any cluster (see real_node::control_plane).
    // GenericWorkload on, so that the Workload, GangScheduling and WorkloadAwarePreemption
    // specs run: it serves scheduling.k8s.io/v1beta1, which the agent discovers and uses.
    let gates = format!(
        "--feature-gates={}",
        workload_feature_gates(DEFAULT_MINOR).context("the default minor has a Workload API")?
    );
    let cp = if with_real_node {
        let address = mcsched_e2e::api::routable_address()?;
        ControlPlane::start_with_args(
            &name,
            options,
            &["--bind-address", &address, "--real-nodes", &gates],
        )
        .await?
    } else {
        ControlPlane::start_with_args(&name, options, &[&gates]).await?
    };
    for i in 1..=NODES {
        create_node(&cp.client, node(i)).await?;
    }
    let real = if with_real_node {
        let node = RealNode::start(&cp, "node-real").await?;
        for image in ["e2e-pause", "e2e-agnhost", "e2e-busybox"] {
            node.import(&real_node::image_dir().join(format!("{image}.tar")))?;
        }
        // A zone of its own, as every simulated node has (the Multi-AZ specs count the
        // zones of schedulable nodes).
        let nodes: Api<Node> = Api::all(cp.client.clone());
        nodes
            .patch(
                "node-real",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                    "topology.kubernetes.io/region": "region-1",
                    "topology.kubernetes.io/zone": "zone-real",
                }}})),
            )
            .await?;
        Some(node)
    } else {
        None
    };
    let node_count = NODES + usize::from(real.is_some());
    let nodes: Api<Node> = Api::all(cp.client.clone());
    wait::until(
        Duration::from_secs(60),
        "every node Ready and untainted",
        || {
            let nodes = nodes.clone();
            async move {
                let list = nodes.list(&Default::default()).await?;
                let ready = list.items.len() == node_count
                    && list.items.iter().all(|n| {
                        mcsched_e2e::objects::ready_status(n).as_deref() == Some("True")
                            && n.spec
                                .as_ref()
                                .and_then(|s| s.taints.as_ref())
                                .is_none_or(|t| t.is_empty())
                    });
                Ok(ready.then_some(()))
            }
        },
    )
    .await?;
    // With the real node, the agent runs as users run it: installed by `kubectl mcsched
    // install`, from its image, in a container there. Elsewhere (the quick run, a machine
    // that cannot run a real node) its debug build runs on the host.
    let _agent = match (scheduler, &real) {
        (Scheduler::Kube, _) => None,
        (Scheduler::Mcsched, Some(node)) => {
            install_agent(&cp, node).await?;
            None
        }
        (Scheduler::Mcsched, None) => Some(host_agent(&cp).await?),
    };

    let repo_list = cp.dir().join("repo-list.yaml");
    std::fs::write(
        &repo_list,
        REPO_LIST_KEYS
            .iter()
            .map(|k| format!("{k}: {E2E_REGISTRY}\n"))
            .collect::<String>(),
    )?;
    let report = cp.dir().join("report.json");
    let log = cp.dir().join("suite.log");
    let mut cmd = Command::new(&suite);
    cmd.env("KUBE_TEST_REPO_LIST", &repo_list);
    cmd.arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .arg(format!("--ginkgo.focus={focus}"))
        .arg("--ginkgo.no-color")
        .arg("--ginkgo.v")
        .arg(format!("--ginkgo.timeout={}s", SUITE_TIMEOUT.as_secs()))
        .arg(format!("--ginkgo.json-report={}", report.display()))
        .arg(format!("--report-dir={}", cp.dir().display()));
    if !skip.is_empty() {
        cmd.arg(format!("--ginkgo.skip={skip}"));
    }
    let command = format!(
        "{} --ginkgo.focus='{focus}'{}",
        suite.file_name().unwrap_or_default().to_string_lossy(),
        if skip.is_empty() {
            String::new()
        } else {
            format!(" --ginkgo.skip='{skip}'")
        }
    );
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent; the suite
    // dies with this test, as the harness's other children do.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(cp.dir().join("suite.stderr"))?);
    let started = Instant::now();
    eprintln!("{}: running {command}", scheduler.name());
    let status = tokio::task::spawn_blocking(move || cmd.status()).await??;
    let duration = started.elapsed();
    eprintln!(
        "{}: suite exited {status} after {duration:.1?}",
        scheduler.name()
    );
    let specs = read_report(&report).with_context(|| {
        format!(
            "no report from the suite ({status}); its output ends:\n{}",
            mcsched_e2e::controlplane::tail(&log)
        )
    })?;
    if let Some(real) = &real {
        std::fs::write(cp.dir().join("kubelet.log"), real.kubelet_log())?;
        std::fs::write(cp.dir().join("containerd.log"), real.containerd_log())?;
        if scheduler == Scheduler::Mcsched {
            std::fs::write(
                cp.dir().join("agent-installed.log"),
                real.pod_logs(keys::SYSTEM_NAMESPACE, keys::AGENT_NAME)?,
            )?;
        }
    }
    drop(real);
    // Kept for a reader when the run is kept (MCSCHED_CONFORMANCE_KEEP): the suite's
    // log, the agent's, the control plane's.
    if let Some(keep) = std::env::var_os("MCSCHED_CONFORMANCE_KEEP") {
        let into = PathBuf::from(keep).join(scheduler.name());
        std::fs::create_dir_all(&into)?;
        for entry in std::fs::read_dir(cp.dir())? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), into.join(entry.file_name()))?;
            }
        }
    }
    Ok(Run {
        specs,
        duration,
        command,
        real_node: with_real_node,
    })
}

/// The specs of a ginkgo JSON report: full name → state, failure message, run time.
fn read_report(path: &Path) -> anyhow::Result<BTreeMap<String, Outcome>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let reports: serde_json::Value = serde_json::from_str(&text)?;
    let mut specs = BTreeMap::new();
    for report in reports.as_array().context("a report is a list")? {
        for spec in report["SpecReports"].as_array().into_iter().flatten() {
            if spec["LeafNodeType"] != "It" {
                // Suite set-up failures are reported as the first spec's: keep them.
                if spec["State"] != "passed" && spec["State"] != "skipped" {
                    specs.insert(
                        format!("({})", spec["LeafNodeType"].as_str().unwrap_or("?")),
                        outcome(spec),
                    );
                }
                continue;
            }
            let mut name: Vec<String> = spec["ContainerHierarchyTexts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(String::from))
                .collect();
            name.push(spec["LeafNodeText"].as_str().unwrap_or("?").to_string());
            specs.insert(name.join(" "), outcome(spec));
        }
    }
    Ok(specs)
}

fn outcome(spec: &serde_json::Value) -> Outcome {
    let mut message = spec["Failure"]["Message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if message.is_empty() && spec["State"] == "skipped" {
        message = spec["Failure"]["Message"]
            .as_str()
            .unwrap_or("")
            .to_string();
    }
    Outcome {
        state: spec["State"].as_str().unwrap_or("?").to_string(),
        message,
        seconds: spec["RunTime"].as_f64().unwrap_or(0.0) / 1e9,
    }
}

/// One line of a message for a table cell.
fn cell(message: &str) -> String {
    let line = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let mut line: String = line.replace('|', "\\|");
    if line.chars().count() > 300 {
        line = line.chars().take(300).collect::<String>() + "…";
    }
    line
}

fn counts(run: &Run) -> String {
    let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for o in run.specs.values() {
        *by_state.entry(o.state.as_str()).or_default() += 1;
    }
    by_state
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn results_md(kube: &Run, mcsched: &Run, focus: &str, skip: &str) -> String {
    let mut md = String::new();
    let real_node = if kube.real_node {
        " and one real node (`controlplane kubelet`, containerd, runc, CNI: its pods run in \
         containers, from the pause, agnhost and busybox images built here by `scripts/image.sh \
         conformance` and imported, under the names the suite's image override \
         (`KUBE_TEST_REPO_LIST`: every registry `mcsched.test/e2e`) gives them)"
    } else {
        " (no real node: this machine cannot run one, or the run was the quick one)"
    };
    let agent = if mcsched.real_node {
        "mcsched-agent installed by `kubectl mcsched install` (its debug build's image, \
         `MCSCHED_IMAGE_BUILD=debug scripts/image.sh agent`, in a container on the real \
         node, where the harness binds its pod: nothing else schedules it; a \
         KubeSchedulerConfiguration with one profile `default-scheduler`)"
    } else {
        "mcsched-agent (its debug build on the host, a KubeSchedulerConfiguration with one \
         profile `default-scheduler`)"
    };
    let _ = writeln!(
        md,
        "# Kubernetes' scheduling e2e suite: kube-scheduler and mcsched\n\n\
         Written by `make conformance` (tests/tests/conformance.rs) from the ginkgo JSON \
         reports of one run each; do not edit by hand. The suite is \
         `k8s.io/kubernetes/test/e2e/scheduling` of the `k8s.io/kubernetes` module in \
         tests/conformance/go.mod, built into .build/conformance.test. Each run has its own \
         control plane (etcd, kube-apiserver, kube-controller-manager) with {NODES} \
         simulated nodes (4 cpu, 8Gi, 20Gi ephemeral storage, 110 pods, a zone each: the \
         kubelet simulator reports their pods Running without containers){real_node}. The \
         default scheduler is kube-scheduler (in-process, profile `default-scheduler`) in \
         one run, {agent} in the other, with kube-scheduler off; both runs at once. Images are never pulled.\n"
    );
    let _ = writeln!(
        md,
        "Focus `{focus}`{}.\n",
        if skip.is_empty() {
            String::new()
        } else {
            format!(", skip `{skip}`")
        }
    );
    let _ = writeln!(md, "| run | specs | duration | command |");
    let _ = writeln!(md, "|---|---|---|---|");
    for (name, run) in [("kube-scheduler", kube), ("mcsched", mcsched)] {
        let _ = writeln!(
            md,
            "| {name} | {} | {:.0} s | `{}` |",
            counts(run),
            run.duration.as_secs_f64(),
            run.command
        );
    }
    let _ = writeln!(
        md,
        "\n| spec | kube-scheduler | mcsched | failure or skip message |"
    );
    let _ = writeln!(md, "|---|---|---|---|");
    let mut names: Vec<&String> = kube.specs.keys().chain(mcsched.specs.keys()).collect();
    names.sort();
    names.dedup();
    let show = |o: Option<&Outcome>| match o {
        Some(o) if o.state == "skipped" => "skipped".to_string(),
        Some(o) => format!("{} ({:.0} s)", o.state, o.seconds),
        None => "not run".to_string(),
    };
    for name in names {
        let (k, m) = (kube.specs.get(name), mcsched.specs.get(name));
        let mut messages = Vec::new();
        for (who, o) in [("kube-scheduler", k), ("mcsched", m)] {
            if let Some(o) = o
                && o.state != "passed"
                && !o.message.is_empty()
            {
                messages.push(format!("{who}: {}", cell(&o.message)));
            }
        }
        if messages.len() == 2 && k.map(|o| &o.message) == m.map(|o| &o.message) {
            messages = vec![format!("both: {}", cell(&k.unwrap().message))];
        }
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            cell(name),
            show(k),
            show(m),
            messages.join("<br>")
        );
    }
    let not_compared = failed_with_kube(kube, mcsched);
    let _ = writeln!(
        md,
        "\n{} spec(s) failed with kube-scheduler, so mcsched was not held to them{}",
        not_compared.len(),
        if not_compared.is_empty() { "." } else { ":\n" }
    );
    for spec in &not_compared {
        let name = spec.lines().next().unwrap_or_default();
        let _ = writeln!(md, "- {}", cell(name));
    }
    md
}

/// The specs that failed with kube-scheduler (not compared: mcsched need not pass them),
/// each with both runs' states, so that a run says what it did not hold mcsched to.
fn failed_with_kube(kube: &Run, mcsched: &Run) -> Vec<String> {
    kube.specs
        .iter()
        .filter(|(_, o)| o.state != "passed" && o.state != "skipped")
        .map(|(name, o)| {
            let ours = mcsched
                .specs
                .get(name)
                .map_or("not run", |o| o.state.as_str());
            format!(
                "{name}
    kube-scheduler {}: {}
    mcsched: {ours}",
                o.state,
                cell(&o.message)
            )
        })
        .collect()
}

/// The specs that passed with kube-scheduler and not with mcsched.
fn regressions(kube: &Run, mcsched: &Run) -> Vec<String> {
    kube.specs
        .iter()
        .filter(|(_, o)| o.state == "passed")
        .filter(|(name, _)| mcsched.specs.get(*name).is_none_or(|o| o.state != "passed"))
        .map(|(name, _)| {
            let why = mcsched
                .specs
                .get(name)
                .map(|o| format!("{}: {}", o.state, cell(&o.message)))
                .unwrap_or_else(|| "not run".to_string());
            format!("{name}\n    {why}")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduling_specs_that_pass_with_kube_scheduler_pass_with_mcsched() -> anyhow::Result<()> {
    let full = std::env::var("MCSCHED_CONFORMANCE").is_ok_and(|v| v == "full");
    let focus = std::env::var("MCSCHED_CONFORMANCE_FOCUS").unwrap_or_else(|_| {
        if full {
            r"\[sig-scheduling\]".to_string()
        } else {
            QUICK_FOCUS.to_string()
        }
    });
    let skip = std::env::var("MCSCHED_CONFORMANCE_SKIP").unwrap_or_else(|_| {
        if full {
            String::new()
        } else {
            QUICK_SKIP.to_string()
        }
    });
    // The real node joins the full run where this machine can run one; the quick run (in
    // `make test`) keeps to simulated nodes: its hostPort spec runs agnhost, whose image
    // build (`scripts/image.sh conformance`) takes minutes cold.
    let with_real_node = full && {
        let mut missing = real_node::missing();
        for image in ["e2e-pause", "e2e-agnhost", "e2e-busybox"] {
            let archive = real_node::image_dir().join(format!("{image}.tar"));
            if !archive.exists() {
                missing.push(format!(
                    "{} (build it with `scripts/image.sh conformance`)",
                    archive.display()
                ));
            }
        }
        // The agent runs on the real node from its image, installed by the CLI.
        if let Err(e) = real_node::agent_image() {
            missing.push(format!(
                "{e} (`make conformance` packs the debug build: MCSCHED_IMAGE_BUILD=debug \
                 scripts/image.sh agent)"
            ));
        }
        if !cli::binary().exists() {
            missing.push(format!(
                "{} (cargo build -p kubectl-mcsched)",
                cli::binary().display()
            ));
        }
        if !missing.is_empty() {
            eprintln!("no real node: missing {}", missing.join("; "));
        }
        missing.is_empty()
    };
    // Both runs at once, each on its own control plane: the specs mostly wait (on pods,
    // on timeouts), so two share this machine's cores as the e2e pool's binaries do.
    let (kube, mcsched) = futures::join!(
        run_suite(Scheduler::Kube, &focus, &skip, with_real_node),
        run_suite(Scheduler::Mcsched, &focus, &skip, with_real_node)
    );
    let (kube, mcsched) = (kube?, mcsched?);
    let md = results_md(&kube, &mcsched, &focus, &skip);
    let out = if full {
        repo_root().join("tests/conformance/results.md")
    } else {
        std::env::temp_dir().join("mcsched-conformance-quick.md")
    };
    std::fs::write(&out, &md)?;
    eprintln!(
        "kube-scheduler: {} in {:.0?}; mcsched: {} in {:.0?}; written to {}",
        counts(&kube),
        kube.duration,
        counts(&mcsched),
        mcsched.duration,
        out.display()
    );
    let not_compared = failed_with_kube(&kube, &mcsched);
    eprintln!(
        "{} spec(s) failed with kube-scheduler and were not compared{}",
        not_compared.len(),
        if not_compared.is_empty() {
            String::new()
        } else {
            format!(":\n{}", not_compared.join("\n"))
        }
    );
    if kube.specs.values().all(|o| o.state != "passed") {
        bail!("no spec passed with kube-scheduler: the cluster is wrong\n{md}");
    }
    let regressions = regressions(&kube, &mcsched);
    if !regressions.is_empty() {
        bail!(
            "{} spec(s) passed with kube-scheduler but not with mcsched:\n{}",
            regressions.len(),
            regressions.join("\n")
        );
    }
    Ok(())
}
