//! The explanation as a table: one row per node, the winner first, the leaf node behind a
//! virtual node, scores (every score plugin with `wide`), the first rejection.

use console::style;
use mcsched_shared::explain::{Explanation, NodeExplanation, Outcome, is_count};

/// How the explanation came about, for its headline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The agent's record of the attempt that bound the pod.
    Decided,
    /// A Pending pod, computed now on the agent's current view.
    Pending,
    /// `--what-if`: a manifest that was never created.
    WhatIf,
}

/// Host and virtual nodes counted apart where virtual nodes were evaluated: sampling
/// (percentageOfNodesToScore) bounds only the host's share.
fn evaluated_apart(e: &Explanation) -> String {
    let virtuals = e.num_evaluated_virtual_nodes;
    if virtuals == 0 {
        return String::new();
    }
    format!(
        " ({} host, {virtuals} virtual)",
        e.num_evaluated_nodes.saturating_sub(virtuals)
    )
}

/// A virtual node's leaf node, with how many of the leaf's nodes scored as high when it
/// was scored as that node (it counted as that many in the pick).
fn leaf_column(n: &NodeExplanation) -> String {
    match (&n.leaf_node, n.leaf_ties) {
        (Some(leaf), Some(ties)) if ties > 1 => format!("{leaf} (1 of {ties} tied)"),
        (Some(leaf), _) => leaf.clone(),
        (None, _) => "-".into(),
    }
}

/// The first rejection of a node, or "ok".
fn verdict(n: &NodeExplanation) -> String {
    n.filters
        .iter()
        .find(|v| v.code != "Success")
        .map(|v| format!("{}: {}", v.plugin, v.reasons.join(", ")))
        .unwrap_or_else(|| "ok".into())
}

/// Whether the agent counted some victims or nominated pods instead of naming them.
fn names_counted_pods(e: &Explanation) -> bool {
    e.pod_entries().any(is_count)
}

/// A table: one row per node, the winner first; `wide` adds every score plugin.
pub fn render(e: &Explanation, wide: bool, mode: Mode) -> String {
    let mut out = String::new();
    let (winner, headline) = match &e.outcome {
        Outcome::Scheduled { node, leaf_node } => {
            let leaf = leaf_node
                .as_ref()
                .map(|l| format!(" (leaf node {l})"))
                .unwrap_or_default();
            (
                Some(node.clone()),
                format!(
                    "{} {node}{leaf}",
                    style(match mode {
                        Mode::Decided => "scheduled on",
                        Mode::Pending => "pending; it fits now on",
                        Mode::WhatIf => "would be scheduled on",
                    })
                    .green()
                    .bold()
                ),
            )
        }
        Outcome::Unschedulable {
            message,
            nominated_node,
            victims,
        } => {
            let nominated = match nominated_node {
                Some(n) if victims.is_empty() => format!("; nominated node {n}"),
                Some(n) => format!("; nominated node {n}, preempting {}", victims.join(", ")),
                None => String::new(),
            };
            (
                None,
                format!(
                    "{} {message}{nominated}",
                    style(match mode {
                        Mode::Decided | Mode::Pending => "unschedulable:",
                        Mode::WhatIf => "would be unschedulable:",
                    })
                    .red()
                    .bold()
                ),
            )
        }
        Outcome::Error { message } => (None, format!("{} {message}", style("error:").red())),
    };
    out.push_str(&format!(
        "POD {}  SCHEDULER {}  AT {}\n{headline}\nnodes: {} in all, {} evaluated{}, {} feasible\n\n",
        e.pod,
        e.scheduler_name,
        e.time,
        e.num_all_nodes,
        e.num_evaluated_nodes,
        evaluated_apart(e),
        e.num_feasible_nodes
    ));
    if names_counted_pods(e) {
        out.push_str("pods of namespaces where you may not list pods are counted, not named\n\n");
    }
    // What the winning leaf's copy would use there (its ServiceAccount).
    if let Some(w) = e.nodes.iter().find(|n| Some(&n.node) == winner.as_ref())
        && !w.leaf_notes.is_empty()
    {
        out.push_str(&format!("in the leaf behind {}:\n", w.node));
        for note in &w.leaf_notes {
            out.push_str(&format!("  {note}\n"));
        }
        out.push('\n');
    }
    if let Some(p) = &e.policy {
        out.push_str(&format!("placement policy: {}\n", p.name));
        for note in &p.notes {
            out.push_str(&format!("  {note}\n"));
        }
        out.push('\n');
    }
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
            leaf_column(n),
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
            num_evaluated_virtual_nodes: 1,
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
                    leaf_ties: None,
                    leaf_notes: vec![],
                    nominated_pods: vec![],
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
                    leaf_ties: Some(12),
                    leaf_notes: vec!["ServiceAccount shop/builder: the leaf has it".into()],
                    nominated_pods: vec![],
                },
            ],
            durations: vec![],
            pre_enqueue: vec![],
            pre_filter: vec![],
            permit: vec![],
            extenders: vec![],
            policy: Some(mcsched_shared::explain::AppliedPolicy {
                name: "PlacementPolicy shop/web".into(),
                notes: vec!["Weighted division by east:2 west:1; the owner's pods: east 2, west 1; next: east".into()],
            }),
        };
        let table = render(&e, true, Mode::Decided);
        assert!(
            table.contains(
                "placement policy: PlacementPolicy shop/web\n  Weighted division by east:2"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "in the leaf behind mcsched-east:\n  ServiceAccount shop/builder: the leaf has it"
            ),
            "{table}"
        );
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[1].contains("scheduled on mcsched-east (leaf node east-3)"),
            "{table}"
        );
        assert_eq!(
            lines[2], "nodes: 2 in all, 2 evaluated (1 host, 1 virtual), 1 feasible",
            "{table}"
        );
        let first_row = lines
            .iter()
            .position(|l| l.starts_with("NODE"))
            .expect("header")
            + 1;
        assert!(lines[first_row].starts_with("mcsched-east"), "{table}");
        // Scored as east-3, one of 12 leaf nodes as good: its scores are the row's.
        assert!(
            lines[first_row].contains("east-3 (1 of 12 tied)") && lines[first_row].contains("80x1"),
            "{table}"
        );
        assert!(
            lines[first_row + 1].contains("NodeResourcesFit: Insufficient cpu"),
            "{table}"
        );
    }

    #[test]
    fn counted_pods_of_other_namespaces_read_as_a_count() {
        console::set_colors_enabled(false);
        let e = Explanation {
            pod: "shop/web".into(),
            scheduler_name: "mcsched".into(),
            time: "2026-11-23T07:00:00Z".into(),
            outcome: Outcome::Unschedulable {
                message: "0/1 nodes are available: 1 Insufficient cpu.".into(),
                nominated_node: Some("n1".into()),
                victims: vec!["shop/low".into(), "2 pods in other namespaces".into()],
            },
            num_all_nodes: 1,
            num_evaluated_nodes: 1,
            num_evaluated_virtual_nodes: 0,
            num_feasible_nodes: 0,
            nodes: vec![],
            durations: vec![],
            pre_enqueue: vec![],
            pre_filter: vec![],
            permit: vec![],
            extenders: vec![],
            policy: None,
        };
        let table = render(&e, false, Mode::WhatIf);
        assert!(
            table.contains("nominated node n1, preempting shop/low, 2 pods in other namespaces"),
            "{table}"
        );
        assert!(
            table.contains("pods of namespaces where you may not list pods are counted, not named"),
            "{table}"
        );
        let mut named = e.clone();
        named.outcome = Outcome::Unschedulable {
            message: String::new(),
            nominated_node: Some("n1".into()),
            victims: vec!["shop/low".into(), "b/one".into()],
        };
        assert!(!render(&named, false, Mode::WhatIf).contains("counted, not named"));
    }
}
