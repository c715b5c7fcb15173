//! `kubectl mcsched explain pod NAME`: why the agent placed a pod where it did (or could
//! not), plugin by plugin and node by node, down to the leaf node behind a virtual node.
//! The agent is reached through the API server's service proxy, so RBAC applies and no
//! port-forward is needed; `--agent-url` talks to it directly.

use anyhow::{Context, bail};
use console::style;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use mcsched_shared::explain::{Explanation, NodeExplanation, Outcome};
use mcsched_shared::keys;

use crate::kube_context::KubeArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The pod to explain (in -n/--namespace, default "default").
    pub name: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Namespace the agent is installed in.
    #[arg(long, default_value = keys::SYSTEM_NAMESPACE, value_name = "NAMESPACE")]
    pub agent_namespace: String,
    /// Talk to the agent at this URL instead of through the API server's service proxy.
    #[arg(long, value_name = "URL")]
    pub agent_url: Option<String>,
    /// With --agent-url: accept the agent's self-signed certificate.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

pub async fn run(kube: &KubeArgs, args: ExplainArgs) -> anyhow::Result<()> {
    let client = kube.client().await?;
    let ns = kube.namespace_or("default").to_string();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let Some(pod) = pods.get_opt(&args.name).await? else {
        bail!("pod {ns}/{} not found", args.name);
    };
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_else(|| "default-scheduler".into());
    let path = format!("/explain/{ns}/{}", args.name);
    let body = match &args.agent_url {
        Some(url) => {
            let http = reqwest::Client::builder()
                .danger_accept_invalid_certs(args.insecure_skip_tls_verify)
                .build()?;
            let resp = http
                .get(format!("{}{path}", url.trim_end_matches('/')))
                .send()
                .await
                .with_context(|| format!("the agent at {url} does not answer"))?;
            let status = resp.status();
            let text = resp.text().await?;
            if !status.is_success() {
                return Err(not_explained(&ns, &args.name, &scheduler, &text));
            }
            text
        }
        None => {
            let services: Api<Service> = Api::namespaced(client.clone(), &args.agent_namespace);
            if services.get_opt(keys::AGENT_NAME).await?.is_none() {
                bail!(
                    "the mcsched agent is not installed: no Service {}/{} (install it with `kubectl mcsched install`, or pass --agent-url)",
                    args.agent_namespace,
                    keys::AGENT_NAME
                );
            }
            let url = format!(
                "/api/v1/namespaces/{}/services/https:{}:{}/proxy{path}",
                args.agent_namespace,
                keys::AGENT_NAME,
                keys::AGENT_PORT
            );
            let req = http::Request::get(url).body(Vec::new())?;
            match client.request_text(req).await {
                Ok(t) => t,
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    return Err(not_explained(&ns, &args.name, &scheduler, &s.message));
                }
                Err(kube::Error::Api(s)) if s.code == 503 => bail!(
                    "the mcsched agent is not ready (no ready endpoint behind Service {}/{}): {}",
                    args.agent_namespace,
                    keys::AGENT_NAME,
                    s.message
                ),
                Err(e) => return Err(e).context("asking the agent through the API server"),
            }
        }
    };
    let explanation: Explanation =
        serde_json::from_str(&body).context("the agent's answer is not an explanation")?;
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&explanation)?),
        Format::Table => print!("{}", render(&explanation, false)),
        Format::Wide => print!("{}", render(&explanation, true)),
    }
    Ok(())
}

fn not_explained(ns: &str, name: &str, scheduler: &str, detail: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the agent has no explanation for pod {ns}/{name} (spec.schedulerName {scheduler:?}; another scheduler may own it): {}",
        detail.trim()
    )
}

/// The first rejection of a node, or "ok".
fn verdict(n: &NodeExplanation) -> String {
    n.filters
        .iter()
        .find(|v| v.code != "Success")
        .map(|v| format!("{}: {}", v.plugin, v.reasons.join(", ")))
        .unwrap_or_else(|| "ok".into())
}

/// A table: one row per node, the winner first; `wide` adds every score plugin.
pub fn render(e: &Explanation, wide: bool) -> String {
    let mut out = String::new();
    let (winner, headline) = match &e.outcome {
        Outcome::Scheduled { node, leaf_node } => {
            let leaf = leaf_node
                .as_ref()
                .map(|l| format!(" (leaf node {l})"))
                .unwrap_or_default();
            (
                Some(node.clone()),
                format!("{} {node}{leaf}", style("scheduled on").green().bold()),
            )
        }
        Outcome::Unschedulable {
            message,
            nominated_node,
        } => {
            let nominated = nominated_node
                .as_ref()
                .map(|n| format!("; nominated node {n}"))
                .unwrap_or_default();
            (
                None,
                format!(
                    "{} {message}{nominated}",
                    style("unschedulable:").red().bold()
                ),
            )
        }
        Outcome::Error { message } => (None, format!("{} {message}", style("error:").red())),
    };
    out.push_str(&format!(
        "POD {}  SCHEDULER {}  AT {}\n{headline}\nnodes: {} in all, {} evaluated, {} feasible\n\n",
        e.pod,
        e.scheduler_name,
        e.time,
        e.num_all_nodes,
        e.num_evaluated_nodes,
        e.num_feasible_nodes
    ));
    let score_plugins: Vec<String> = e
        .nodes
        .iter()
        .flat_map(|n| n.scores.iter().map(|s| s.plugin.clone()))
        .fold(Vec::new(), |mut acc, p| {
            if !acc.contains(&p) {
                acc.push(p);
            }
            acc
        });
    let mut header = vec!["NODE".to_string(), "LEAF NODE".into(), "SCORE".into()];
    if wide {
        header.extend(score_plugins.iter().cloned());
    }
    header.push("FILTERS".into());
    let mut rows = vec![header];
    let mut nodes: Vec<&NodeExplanation> = e.nodes.iter().collect();
    nodes.sort_by_key(|n| {
        (
            Some(&n.node) != winner.as_ref(),
            !n.feasible,
            -n.total_score.unwrap_or(0),
        )
    });
    for n in nodes {
        let mut row = vec![
            n.node.clone(),
            n.leaf_node.clone().unwrap_or_else(|| "-".into()),
            n.total_score
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
        ];
        if wide {
            for p in &score_plugins {
                row.push(
                    n.scores
                        .iter()
                        .find(|s| &s.plugin == p)
                        .map(|s| format!("{}x{}", s.normalized, s.weight))
                        .unwrap_or_else(|| "-".into()),
                );
            }
        }
        row.push(verdict(n));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for (i, row) in rows.iter().enumerate() {
        let last = row.len() - 1;
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(j, c)| {
                if j == last {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[j])
                }
            })
            .collect();
        let line = line.join("   ");
        let styled = if i == 0 {
            style(line).bold().to_string()
        } else if Some(&row[0]) == winner.as_ref() {
            style(line).green().to_string()
        } else if row[last] != "ok" {
            style(line).dim().to_string()
        } else {
            line
        };
        out.push_str(&styled);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_shared::explain::{PluginScore, PluginVerdict};

    #[test]
    fn the_winner_comes_first_with_its_leaf_node() {
        console::set_colors_enabled(false);
        let ok = |p: &str| PluginVerdict {
            plugin: p.into(),
            code: "Success".into(),
            reasons: vec![],
        };
        let e = Explanation {
            pod: "default/web".into(),
            scheduler_name: "mcsched".into(),
            time: "2026-11-23T07:00:00Z".into(),
            outcome: Outcome::Scheduled {
                node: "mcsched-east".into(),
                leaf_node: Some("east-3".into()),
            },
            num_all_nodes: 2,
            num_evaluated_nodes: 2,
            num_feasible_nodes: 1,
            nodes: vec![
                NodeExplanation {
                    node: "host-a".into(),
                    feasible: false,
                    filters: vec![
                        ok("NodeName"),
                        PluginVerdict {
                            plugin: "NodeResourcesFit".into(),
                            code: "Unschedulable".into(),
                            reasons: vec!["Insufficient cpu".into()],
                        },
                    ],
                    scores: vec![],
                    total_score: None,
                    leaf_node: None,
                },
                NodeExplanation {
                    node: "mcsched-east".into(),
                    feasible: true,
                    filters: vec![ok("NodeName"), ok("LeafNodeFit")],
                    scores: vec![PluginScore {
                        plugin: "NodeResourcesFit".into(),
                        raw: 80,
                        normalized: 80,
                        weight: 1,
                        weighted: 80,
                    }],
                    total_score: Some(80),
                    leaf_node: Some("east-3".into()),
                },
            ],
            durations: vec![],
            pre_filter: vec![],
            extenders: vec![],
        };
        let table = render(&e, true);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[1].contains("scheduled on mcsched-east (leaf node east-3)"),
            "{table}"
        );
        let first_row = lines
            .iter()
            .position(|l| l.starts_with("NODE"))
            .expect("header")
            + 1;
        assert!(lines[first_row].starts_with("mcsched-east"), "{table}");
        assert!(
            lines[first_row].contains("east-3") && lines[first_row].contains("80x1"),
            "{table}"
        );
        assert!(
            lines[first_row + 1].contains("NodeResourcesFit: Insufficient cpu"),
            "{table}"
        );
    }
}
