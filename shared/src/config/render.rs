//! The human summary `mcsched-agent --check` prints.

use std::fmt::Write;

use super::catalog::Point;
use super::cluster_policies;
use super::duration;
use super::model::SchedulerConfig;

pub fn render_profiles(cfg: &SchedulerConfig) -> String {
    let mut out = String::new();
    let pct = cfg
        .percentage_of_nodes_to_score
        .map(|p| format!("{p}%"))
        .unwrap_or_else(|| "adaptive".into());
    let _ = writeln!(out, "apiVersion: {}", cfg.api_version);
    let _ = writeln!(out, "parallelism: {}", cfg.parallelism);
    let _ = writeln!(out, "percentageOfNodesToScore: {pct}");
    let _ = writeln!(
        out,
        "podBackoff: initial {}s, max {}s",
        cfg.pod_initial_backoff_seconds, cfg.pod_max_backoff_seconds
    );
    let le = &cfg.leader_election;
    if le.leader_elect {
        let _ = writeln!(
            out,
            "leaderElection: lease {}/{} (leaseDuration {}, renewDeadline {}, retryPeriod {})",
            le.resource_namespace,
            le.resource_name,
            duration::format(le.lease_duration),
            duration::format(le.renew_deadline),
            duration::format(le.retry_period)
        );
    } else {
        let _ = writeln!(out, "leaderElection: off");
    }
    let cc = &cfg.client_connection;
    let _ = writeln!(out, "clientConnection: qps {}, burst {}", cc.qps, cc.burst);
    for p in &cfg.profiles {
        let pct = p
            .percentage_of_nodes_to_score
            .map(|v| format!(" (percentageOfNodesToScore {v}%)"))
            .unwrap_or_default();
        let _ = writeln!(out, "profile {}{pct}:", p.scheduler_name);
        for point in Point::ALL {
            let list = p.plugins.get(point);
            if list.is_empty() {
                continue;
            }
            let names: Vec<String> = list
                .iter()
                .map(|r| {
                    if point.weighted() {
                        format!("{}({})", r.name, r.weight)
                    } else {
                        r.name.clone()
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "  {:<11} {}",
                format!("{}:", point.field()),
                names.join(", ")
            );
        }
        // The cluster policies' arguments: what decides where replicas go.
        let mut described = std::collections::HashSet::new();
        for r in p.plugins.pre_score.iter().chain(&p.plugins.score) {
            if described.insert(r.name.as_str())
                && let Some(text) = cluster_policies::describe(&r.name, &p.args)
            {
                let _ = writeln!(out, "  {:<11} {}: {text}", "args:", r.name);
            }
        }
    }
    for e in &cfg.extenders {
        let verbs: Vec<String> = [
            ("filter", &e.filter_verb),
            ("prioritize", &e.prioritize_verb),
            ("bind", &e.bind_verb),
            ("preempt", &e.preempt_verb),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect();
        let _ = writeln!(
            out,
            "extender {}: {} weight {}{}{}",
            e.url_prefix,
            verbs.join(" "),
            e.weight,
            if e.ignorable { " ignorable" } else { "" },
            if e.node_cache_capable {
                " nodeCacheCapable"
            } else {
                ""
            },
        );
    }
    for w in &cfg.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}
