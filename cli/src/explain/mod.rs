//! `kubectl mcsched explain pod NAME`: why the agent placed a pod where it did (or why it
//! fits nowhere, and what would change that), plugin by plugin and node by node, down to
//! the leaf node behind a virtual node. `explain --what-if -f FILE` asks the same of a
//! manifest that is never created. Both go through the API server to mcsched's aggregated
//! API (`explanations` and `whatifs` of `mcsched.io/v1alpha1`), as the caller.

mod advice;
mod api;
mod manifest;
pub mod pod_group;
mod render;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec};
use kube::Api;
use mcsched_shared::api::WhatIf;
use mcsched_shared::explain::Explanation;
use mcsched_shared::keys;

use crate::kube_context::KubeArgs;
use api::ApiError;
pub use render::Mode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ViewArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The pod to explain (in -n/--namespace, else the kubeconfig context's namespace).
    pub name: String,
    #[command(flatten)]
    pub view: ViewArgs,
}

#[derive(Debug, clap::Args)]
pub struct WhatIfArgs {
    /// Simulate the pod of a manifest (-f) on the agent's current view (a WhatIf of
    /// mcsched.io, created in the pod's namespace): nothing is created or bound.
    #[arg(long, required = true, requires = "filename")]
    pub what_if: bool,
    /// The manifest: a Pod, or a workload whose pod template is simulated (Deployment,
    /// ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, ReplicationController); - reads stdin.
    #[arg(short = 'f', long, value_name = "FILE", required = true)]
    pub filename: Option<PathBuf>,
    /// The profile to simulate when the manifest sets no spec.schedulerName.
    #[arg(long, value_name = "NAME", default_value = keys::DEFAULT_SCHEDULER_NAME)]
    pub scheduler_name: String,
    #[command(flatten)]
    pub view: ViewArgs,
}

pub async fn run(kube: &KubeArgs, args: ExplainArgs) -> anyhow::Result<()> {
    let (client, ns) = kube.namespaced_client_without_retries().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = match pods.get_opt(&args.name).await {
        Ok(Some(p)) => p,
        Ok(None) => bail!("pod {ns}/{} not found", args.name),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            bail!("you may not get pods in namespace {ns}: {}", s.message)
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("reading pod {ns}/{}", args.name)));
        }
    };
    let scheduler = mcsched_shared::pod::scheduler_name(&pod).to_string();
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let explanation = match api::get_explanation(&client, &ns, &args.name).await {
        Ok(e) => e.status,
        Err(ApiError::Refused {
            code: 404, message, ..
        }) => {
            bail!(
                "no explanation for pod {ns}/{} (spec.schedulerName {scheduler:?}; another scheduler may own it): {message}",
                args.name
            )
        }
        Err(e) => return Err(e.into()),
    };
    let mode = if bound { Mode::Decided } else { Mode::Pending };
    show(&client, explanation, pod, mode, args.view.output).await
}

pub async fn what_if(kube: &KubeArgs, args: WhatIfArgs) -> anyhow::Result<()> {
    let Some(file) = args.filename.as_deref() else {
        bail!("--what-if needs -f FILE");
    };
    // The manifest's namespace, else -n, else the context's.
    let (client, context_namespace) = kube.namespaced_client_without_retries().await?;
    let mut pod = manifest::read_pod(file, &context_namespace)?;
    if let Some(spec) = pod.spec.as_mut()
        && spec.scheduler_name.as_deref().is_none_or(str::is_empty)
    {
        spec.scheduler_name = Some(args.scheduler_name.clone());
    }
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let template = PodTemplateSpec {
        metadata: Some(pod.metadata.clone()),
        spec: pod.spec.clone(),
    };
    let answer = match api::create_what_if(&client, &WhatIf::new(&namespace, template)).await {
        Ok(w) => w,
        Err(ApiError::Refused { code, message, .. }) => {
            bail!(
                "the agent refused to simulate {} ({code}): {message}",
                file.display()
            )
        }
        Err(e) => return Err(e.into()),
    };
    let explanation = answer.status.with_context(|| {
        format!(
            "the agent answered the WhatIf for {} without a status",
            file.display()
        )
    })?;
    show(&client, explanation, pod, Mode::WhatIf, args.view.output).await
}

async fn show(
    client: &kube::Client,
    explanation: Explanation,
    pod: Pod,
    mode: Mode,
    output: Format,
) -> anyhow::Result<()> {
    match output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
        Format::Yaml => print!("{}", mcsched_shared::yaml::to_string(&explanation)?),
        Format::Table | Format::Wide => {
            print!(
                "{}",
                render::render(&explanation, output == Format::Wide, mode)
            );
            if mode != Mode::Decided {
                let facts = facts(client, &explanation, pod).await;
                print!("{}", advice::render(&explanation, &facts));
            }
        }
    }
    Ok(())
}

/// The taints of the nodes (LeafNode)TaintToleration rejected; best-effort, as a user who may read
/// pods need not be allowed to read nodes.
async fn facts(client: &kube::Client, e: &Explanation, pod: Pod) -> advice::Facts {
    let tainted: Vec<&str> = e
        .nodes
        .iter()
        .filter(|n| {
            n.filters
                .iter()
                .any(|v| v.plugin.ends_with("TaintToleration") && v.code != "Success")
        })
        .map(|n| n.node.as_str())
        .collect();
    let mut taints = BTreeMap::new();
    if !tainted.is_empty() {
        let nodes: Api<Node> = Api::all(client.clone());
        for name in tainted {
            match nodes.get_opt(name).await {
                Ok(Some(n)) => {
                    let t = n.spec.and_then(|s| s.taints).unwrap_or_default();
                    taints.insert(name.to_string(), t);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(node = name, error = %e, "reading node taints for advice");
                    break;
                }
            }
        }
    }
    advice::Facts {
        pod: Some(pod),
        taints,
    }
}
