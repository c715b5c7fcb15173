//! `kubectl mcsched install`: the agent and everything it needs, by server-side apply.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::{Api, Client};
use mcsched_shared::keys;
use mcsched_shared::manifests::{self, InstallOptions, Object};

use crate::apply::{self, Action};
use crate::duration;
use crate::kube_context::KubeArgs;
use crate::progress::{Mark, Progress};
use crate::rollout::{self, Rollout};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    /// Apply for real.
    None,
    /// Render locally and print; nothing is sent to the cluster.
    Client,
    /// Send every object with dryRun=All: the API server validates and admits, stores nothing.
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManifestFormat {
    Yaml,
    Json,
}

/// Install the mcsched agent (in -n NAMESPACE, default mcsched-system).
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The spec.schedulerName pods use to choose mcsched (default mcsched; with --config,
    /// a profile of that file).
    #[arg(long, value_name = "NAME")]
    pub scheduler_name: Option<String>,
    /// The agent's container image (default: the release of this CLI's version). For a
    /// mirrored or locally built one (`make image`, then `docker load`, `ctr -n k8s.io
    /// images import` or `kind load image-archive` onto the nodes) give its reference with
    /// a tag other than `latest`: the kubelet then uses a loaded image as it is.
    #[arg(long, value_name = "IMAGE", default_value_t = manifests::default_image())]
    pub image: String,
    /// Agent replicas; more than one elect a leader and get a PodDisruptionBudget.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: i32,
    /// Run the agent only on nodes with these labels (the pods' nodeSelector), e.g. the
    /// control-plane nodes; repeatable or comma-separated.
    #[arg(long, value_name = "KEY=VALUE")]
    pub node_selector: Vec<String>,
    /// A KubeSchedulerConfiguration file to ship instead of the default one; checked by
    /// the agent's own parser before anything is applied.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Only show what would be applied: client (render locally) or server (dryRun=All).
    #[arg(long, value_enum, value_name = "MODE", default_value = "none",
          num_args = 0..=1, default_missing_value = "client", require_equals = true)]
    pub dry_run: DryRun,
    /// With --dry-run=client: print the objects as yaml or json instead of a list.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<ManifestFormat>,
    /// Wait until the Deployment has rolled out (every replica of this install's template
    /// available), as `kubectl rollout status` judges it.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (e.g. 90s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration::parse)]
    pub timeout: Duration,
    /// Do not ask before changing an existing install.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

pub async fn run(kube: &KubeArgs, args: InstallArgs) -> anyhow::Result<()> {
    let namespace = kube.namespace_or(keys::SYSTEM_NAMESPACE).to_string();
    let config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--config: cannot read {}", path.display()))?;
            Some((text, path.display().to_string()))
        }
        None => None,
    };
    let opts = InstallOptions {
        namespace: namespace.clone(),
        scheduler_name: args.scheduler_name.clone(),
        image: args.image.clone(),
        replicas: args.replicas,
        node_selector: crate::cluster::names::node_selector(&args.node_selector)?,
        config,
    };
    // Everything is rendered, and the configuration checked, before the cluster is touched.
    let objects = manifests::render(&opts)?;
    let cfg = manifests::AgentConfig::resolve(&opts)?;

    if args.output.is_some() && args.dry_run != DryRun::Client {
        bail!("-o/--output: only with --dry-run=client (it prints what would be applied)");
    }
    if args.dry_run == DryRun::Client {
        match args.output {
            Some(ManifestFormat::Yaml) => print!("{}", manifests::to_yaml_stream(&objects)?),
            Some(ManifestFormat::Json) => println!(
                "{}",
                serde_json::to_string_pretty(&manifests::to_json_list(&objects))?
            ),
            None => {
                for o in &objects {
                    println!("{} (dry run)", located(o));
                }
            }
        }
        return Ok(());
    }

    let client = kube.client().await?;
    preflight(&client, &namespace, &args).await?;
    let server_dry_run = args.dry_run == DryRun::Server;
    let progress = Progress::stdout();
    let mut counts = [0usize; 3];
    for o in &objects {
        let step = progress.step(format!("applying {}", located(o)));
        if let Object::Namespace(_) = o
            && let Some(reason) = foreign_namespace(&client, o).await?
        {
            step.finish(Mark::Skipped, format!("{} {reason}", located(o)));
            continue;
        }
        match apply::apply(&client, o, server_dry_run).await {
            Ok(action) => {
                counts[action as usize] += 1;
                let suffix = if server_dry_run {
                    " (server dry run)"
                } else {
                    ""
                };
                step.finish(
                    Mark::Done,
                    format!("{} {}{suffix}", located(o), action.as_str()),
                );
            }
            Err(e) => {
                step.finish(Mark::Failed, format!("{} failed", located(o)));
                return Err(e.into());
            }
        }
    }
    // What an earlier version installed and this one no longer does (a broader role, say)
    // must not outlive the upgrade.
    let mut pruned = 0;
    if !server_dry_run {
        let rendered: Vec<(String, Option<String>)> = objects
            .iter()
            .map(|o| (o.reference(), o.namespace().map(String::from)))
            .collect();
        for f in apply::find(&client, &manifests::install_selector(&namespace)).await? {
            if rendered.contains(&(f.reference(), f.namespace.clone())) {
                continue;
            }
            let step = progress.step(format!("pruning {}", f.located()));
            match apply::delete(&client, &f).await {
                Ok(()) => {
                    pruned += 1;
                    step.finish(
                        Mark::Done,
                        format!("{} pruned (no longer part of the install)", f.located()),
                    );
                }
                Err(e) => {
                    step.finish(Mark::Failed, format!("{} not pruned", f.located()));
                    return Err(e.into());
                }
            }
        }
    }
    if args.wait && !server_dry_run {
        let step = progress.step(format!(
            "waiting up to {} for deployment/{} to roll out",
            duration::display(args.timeout),
            keys::AGENT_NAME
        ));
        match wait_available(&client, &namespace, args.timeout).await {
            Ok(ready) => step.finish(
                Mark::Done,
                format!("deployment/{} available ({ready})", keys::AGENT_NAME),
            ),
            Err(e) => {
                step.finish(
                    Mark::Failed,
                    format!("deployment/{} not available", keys::AGENT_NAME),
                );
                return Err(e);
            }
        }
    }
    println!();
    let verb = if server_dry_run {
        "would be installed (server dry run)"
    } else {
        "installed"
    };
    let pruned = if pruned > 0 {
        format!(", {pruned} pruned")
    } else {
        String::new()
    };
    println!(
        "mcsched {verb} in namespace {namespace}: {} objects ({} created, {} configured, {} unchanged{pruned})",
        counts.iter().sum::<usize>(),
        counts[Action::Created as usize],
        counts[Action::Configured as usize],
        counts[Action::Unchanged as usize],
    );
    println!(
        "  image {}, {} replica(s), scheduler name(s): {}",
        args.image,
        args.replicas,
        cfg.scheduler_names.join(", ")
    );
    if !server_dry_run {
        println!(
            "Pods choose mcsched with `spec.schedulerName: {}`; `kubectl mcsched explain pod NAME` tells why they land where they do.",
            cfg.scheduler_names
                .first()
                .map(String::as_str)
                .unwrap_or(keys::DEFAULT_SCHEDULER_NAME)
        );
    }
    Ok(())
}

fn located(o: &Object) -> String {
    match o.namespace() {
        Some(ns) => format!("{} (namespace {ns})", o.reference()),
        None => o.reference(),
    }
}

/// An existing namespace install did not create is left alone, so that `uninstall` never
/// deletes it; one still terminating after an uninstall cannot take new objects.
async fn foreign_namespace(client: &Client, o: &Object) -> anyhow::Result<Option<String>> {
    let Some(existing) = apply::current(client, o).await? else {
        return Ok(None);
    };
    if existing.metadata.deletion_timestamp.is_some() {
        bail!(
            "namespace {} is still terminating (from an earlier uninstall?); wait until it is gone",
            o.name()
        );
    }
    let ours = existing
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::INSTALL_LABEL))
        .is_some();
    Ok((!ours).then(|| "exists and is not managed by mcsched: left as is".to_string()))
}

/// One install per cluster (its cluster-wide objects have fixed names); an existing one
/// here is updated, after asking on a terminal.
async fn preflight(client: &Client, namespace: &str, args: &InstallArgs) -> anyhow::Result<()> {
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    if let Some(crb) = crbs
        .get_opt(keys::AGENT_NAME)
        .await
        .context("checking for an existing install")?
    {
        let owner = crb
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::INSTALL_LABEL))
            .cloned()
            .unwrap_or_default();
        if owner != namespace {
            bail!(
                "mcsched is already installed in namespace {owner:?} (clusterrolebinding/{}); uninstall it first (`kubectl mcsched uninstall -n {owner}`) or install with -n {owner}",
                keys::AGENT_NAME
            );
        }
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let existing = deployments
        .get_opt(keys::AGENT_NAME)
        .await
        .context("checking for an existing install")?;
    if let Some(d) = existing
        && !args.yes
        && args.dry_run == DryRun::None
        && console::Term::stdout().is_term()
        && console::Term::stderr().is_term()
    {
        let image = d
            .spec
            .template
            .spec
            .and_then(|p| p.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_default();
        let go_on = dialoguer::Confirm::new()
            .with_prompt(format!(
                "mcsched is already installed in {namespace} (image {image}); apply this install over it?"
            ))
            .default(true)
            .interact()
            .context("asking for confirmation")?;
        if !go_on {
            bail!("install cancelled");
        }
    }
    Ok(())
}

/// Waits until the Deployment has rolled out: on an upgrade its Available condition is
/// True from the start (the old pods serve until the new ones are ready), so that alone
/// would return before any pod of the new template runs. On timeout, says what the
/// rollout still waits for and which conditions it has.
async fn wait_available(
    client: &Client,
    namespace: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let d = api
            .get(keys::AGENT_NAME)
            .await
            .with_context(|| format!("reading deployment {namespace}/{}", keys::AGENT_NAME))?;
        let waiting = match rollout::status(&d) {
            Rollout::Done(_) => {
                let status = d.status.clone().unwrap_or_default();
                return Ok(format!(
                    "{}/{} replicas ready",
                    status.ready_replicas.unwrap_or(0),
                    d.spec.replicas.unwrap_or(1)
                ));
            }
            Rollout::Failed(why) => bail!("{why}: {}", not_available_message(namespace, &d, None)),
            Rollout::Waiting(what) => what,
        };
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{} ({waiting})",
                not_available_message(namespace, &d, Some(timeout))
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn not_available_message(namespace: &str, d: &Deployment, timeout: Option<Duration>) -> String {
    let status = d.status.clone().unwrap_or_default();
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| {
            let mut s = format!(
                "{}={}",
                c.type_.as_deref().unwrap_or("?"),
                c.status.as_deref().unwrap_or("?")
            );
            if let Some(r) = &c.reason {
                s.push_str(&format!(" ({r}"));
                if let Some(m) = &c.message {
                    s.push_str(&format!(": {m}"));
                }
                s.push(')');
            }
            s
        })
        .collect();
    let conditions = if conditions.is_empty() {
        "no conditions reported (is kube-controller-manager running?)".to_string()
    } else {
        format!("conditions {}", conditions.join("; "))
    };
    let within = timeout
        .map(|t| format!(" within {}", duration::display(t)))
        .unwrap_or_default();
    format!(
        "deployment {namespace}/{} did not roll out{within}: {}/{} replicas ready, {conditions}. \
         Look at its pods: kubectl get pods -n {namespace} -l app.kubernetes.io/name={}",
        keys::AGENT_NAME,
        status.ready_replicas.unwrap_or(0),
        d.spec.replicas.unwrap_or(1),
        keys::AGENT_NAME,
    )
}
