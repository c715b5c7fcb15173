//! For a pod that fits nowhere: the reasons grouped across nodes, the nodes that one
//! change would open, and what that change is. Hints follow kube-scheduler's reason
//! strings, so they also work for reasons an operator knows from FailedScheduling.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Taint};
use mcsched_shared::explain::{Explanation, Outcome, PluginVerdict};
use mcsched_shared::{keys, resources, taints};

/// What the CLI knows beside the explanation: the pod, and the taints of the nodes
/// TaintToleration rejected (read best-effort; hints get vaguer without them).
#[derive(Debug, Default)]
pub struct Facts {
    pub pod: Option<Pod>,
    pub taints: BTreeMap<String, Vec<Taint>>,
}

/// One reason and the nodes that gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub plugin: String,
    pub reason: String,
    pub nodes: Vec<String>,
    /// UnschedulableAndUnresolvable: evicting pods would not help.
    pub unresolvable: bool,
}

fn failed(v: &PluginVerdict) -> bool {
    v.code != "Success" && v.code != "Skip"
}

/// Reasons grouped across nodes, most nodes first; a PreFilter rejection stands for
/// every node (`nodes` holds "all nodes").
pub fn groups(e: &Explanation) -> Vec<Group> {
    let mut by_reason: BTreeMap<(String, String), Group> = BTreeMap::new();
    let mut add = |plugin: &str, reason: &str, node: &str, code: &str| {
        let g = by_reason
            .entry((plugin.to_string(), reason.to_string()))
            .or_insert_with(|| Group {
                plugin: plugin.into(),
                reason: reason.into(),
                nodes: Vec::new(),
                unresolvable: true,
            });
        g.nodes.push(node.into());
        g.unresolvable &= code == "UnschedulableAndUnresolvable";
    };
    for v in e.pre_filter.iter().filter(|v| failed(v)) {
        for r in reasons_of(v) {
            add(&v.plugin, &r, "all nodes", &v.code);
        }
    }
    for n in &e.nodes {
        for v in n.filters.iter().filter(|v| failed(v)) {
            for r in reasons_of(v) {
                add(&v.plugin, &r, &n.node, &v.code);
            }
        }
    }
    let mut out: Vec<Group> = by_reason.into_values().collect();
    out.sort_by(|a, b| {
        b.nodes
            .len()
            .cmp(&a.nodes.len())
            .then_with(|| a.reason.cmp(&b.reason))
    });
    out
}

fn reasons_of(v: &PluginVerdict) -> Vec<String> {
    if v.reasons.is_empty() {
        vec![v.code.clone()]
    } else {
        v.reasons.clone()
    }
}

/// Nodes that exactly one plugin rejects, with that plugin's verdict: the ones a single
/// change would open.
pub fn nearest(e: &Explanation) -> Vec<(&str, &PluginVerdict)> {
    e.nodes
        .iter()
        .filter(|n| !n.feasible)
        .filter_map(|n| {
            let mut failing = n.filters.iter().filter(|v| failed(v));
            let first = failing.next()?;
            failing
                .all(|v| v.plugin == first.plugin)
                .then_some((n.node.as_str(), first))
        })
        .collect()
}

fn node_list(nodes: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut s = nodes
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if nodes.len() > SHOWN {
        s.push_str(&format!(", +{} more", nodes.len() - SHOWN));
    }
    s
}

fn requested(pod: &Pod, resource: &str) -> Option<String> {
    let r = resources::pod_requests(pod).ok()?;
    match resource {
        resources::CPU => Some(if r.milli_cpu % 1000 == 0 {
            format!("{}", r.milli_cpu / 1000)
        } else {
            format!("{}m", r.milli_cpu)
        }),
        resources::MEMORY => Some(bytes(r.memory)),
        resources::EPHEMERAL_STORAGE => Some(bytes(r.ephemeral_storage)),
        other => r.scalar.get(other).map(|v| v.to_string()),
    }
}

fn bytes(b: i64) -> String {
    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;
    if b >= GI && b % GI == 0 {
        format!("{}Gi", b / GI)
    } else if b >= MI && b % MI == 0 {
        format!("{}Mi", b / MI)
    } else {
        b.to_string()
    }
}

fn taint_text(t: &Taint) -> String {
    match &t.value {
        Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// The untolerated taints of `nodes`, deduplicated, when the nodes' taints are known.
/// `leaf_tolerated`: LeafNodeTaintToleration, for which the leaf taints never count.
fn untolerated(nodes: &[String], facts: &Facts, leaf_tolerated: bool) -> Vec<Taint> {
    let tolerations = facts
        .pod
        .as_ref()
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let mut out: Vec<Taint> = Vec::new();
    for n in nodes {
        for t in facts.taints.get(n).into_iter().flatten() {
            if leaf_tolerated && (t.key == keys::LEAF_TAINT || t.key == keys::KOSMOS_LEAF_TAINT) {
                continue;
            }
            let blocks = taints::first_untolerated(std::slice::from_ref(t), &tolerations).is_some()
                && !out
                    .iter()
                    .any(|o| o.key == t.key && o.value == t.value && o.effect == t.effect);
            if blocks {
                out.push(t.clone());
            }
        }
    }
    out
}

/// What would open the group's nodes, or None when there is nothing better to say than
/// the reason itself.
pub fn hint(g: &Group, facts: &Facts) -> Option<String> {
    let nodes = node_list(&g.nodes);
    let r = g.reason.as_str();
    let text = match g.plugin.as_str() {
        "NodeResourcesFit" => {
            if let Some(res) = r.strip_prefix("Insufficient ") {
                let asks = facts
                    .pod
                    .as_ref()
                    .and_then(|p| requested(p, res))
                    .map(|q| format!(" ({q})"))
                    .unwrap_or_default();
                if g.unresolvable {
                    // kube-scheduler says so when the request exceeds the allocatable.
                    format!(
                        "the pod requests more {res}{asks} than {nodes} have allocatable at all: lower spec.containers[*].resources.requests.{res}, or add a bigger node"
                    )
                } else {
                    format!(
                        "lower spec.containers[*].resources.requests.{res}{asks}, free {res} on {nodes}, or add a node"
                    )
                }
            } else if r == "Too many pods" {
                format!(
                    "{nodes} run as many pods as their allocatable pods allow: free a slot or add nodes"
                )
            } else {
                return None;
            }
        }
        "NodeAffinity" if r.contains("scheduler-enforced") => format!(
            "the profile's NodeAffinity addedAffinity excludes {nodes}: see the scheduler's pluginConfig"
        ),
        "NodeAffinity" => "no node matches spec.nodeSelector / spec.affinity.nodeAffinity: relax them, or label a node to match (kubectl label node NODE KEY=VALUE)".to_string(),
        "NodeName" => "spec.nodeName names another node".to_string(),
        "NodeUnschedulable" => format!("uncordon: kubectl uncordon {}", g.nodes.join(" ")),
        "TaintToleration" | "LeafNodeTaintToleration" => {
            let ts = untolerated(&g.nodes, facts, g.plugin == "LeafNodeTaintToleration");
            if ts.is_empty() {
                format!(
                    "add a toleration for the taints of {nodes} to spec.tolerations, or remove them (kubectl taint node NODE KEY-)"
                )
            } else {
                let leaf = ts.iter().any(|t| t.key == keys::LEAF_TAINT);
                let list = ts.iter().map(taint_text).collect::<Vec<_>>().join(", ");
                let mut s = format!("tolerate {list} in spec.tolerations");
                if leaf {
                    s.push_str(&format!(
                        " ({} marks the virtual nodes of leaf clusters: tolerating it lets the pod run in them)",
                        keys::LEAF_TAINT
                    ));
                } else {
                    s.push_str(", or remove the taint (kubectl taint node NODE KEY-)");
                }
                s
            }
        }
        "NodePorts" => format!(
            "another pod holds the same hostPort on {nodes}: change or drop spec.containers[*].ports[*].hostPort"
        ),
        "InterPodAffinity" if r.contains("existing pods anti-affinity") => format!(
            "pods on {nodes} have a required anti-affinity against this pod's labels: move them, or change the labels"
        ),
        "InterPodAffinity" if r.contains("anti-affinity") => format!(
            "pods matching the required podAntiAffinity already run in the topology domains of {nodes}: add a node in a new domain, or make the rule preferredDuringScheduling"
        ),
        "InterPodAffinity" => format!(
            "no pod matching the required podAffinity runs in the topology domains of {nodes}: start one first, or make the rule preferredDuringScheduling"
        ),
        "PodTopologySpread" if r.contains("missing required label") => format!(
            "{nodes} lack a constraint's topologyKey label: label them, or exclude them with nodeAffinityPolicy"
        ),
        "PodTopologySpread" => format!(
            "placing it on {nodes} would exceed maxSkew: raise maxSkew, use whenUnsatisfiable: ScheduleAnyway, or add room in the emptier domains"
        ),
        "VolumeBinding" | "LeafNodeVolumeBinding" => {
            if r.contains("didn't find available persistent volumes") {
                format!(
                    "no free PersistentVolume fits the claim on {nodes}: create one there, or use a StorageClass with a provisioner"
                )
            } else if r.contains("volume node affinity conflict") {
                format!(
                    "the claim's volume is reachable only from other nodes than {nodes} (the PersistentVolume's nodeAffinity)"
                )
            } else if r.contains("enough free storage") {
                format!("the CSI driver reports too little free storage on {nodes}")
            } else if r.contains("non-existent pv") {
                "a claim is bound to a PersistentVolume that does not exist: recreate the volume or the claim".into()
            } else if r.contains("unbound immediate") {
                "a claim with an Immediate StorageClass is not bound yet: see kubectl describe pvc"
                    .into()
            } else if r.contains("not found") {
                format!("create what is missing: {r}")
            } else {
                return None;
            }
        }
        "VolumeZone" => format!("the pod's volumes live in other zones than {nodes}"),
        "VolumeRestrictions" if r.contains("ReadWriteOncePod") => {
            "another pod uses the ReadWriteOncePod claim: only one pod may".into()
        }
        "VolumeRestrictions" => {
            format!("a disk the pod mounts is already in use on {nodes}")
        }
        "NodeVolumeLimits" => format!("{nodes} reached their CSI volume limit"),
        // engine's served_fields::not_served: `leaf cluster east (v1.34) does not serve spec.x`.
        "LeafNodeFit" if r.contains(") does not serve ") => "that leaf cluster's Kubernetes is older than a field of the pod's copy (named above), which its API server would drop: upgrade the leaf, leave the field out, or keep the pod off it (nodeAffinity on mcsched.io/cluster)".to_string(),
        // engine's kept_fields::drops: `leaf cluster east (v1.37.2) drops spec.x (its feature
        // gate is off there, ...)`, learned by pod sync's dry run there.
        "LeafNodeFit" if r.contains(") drops ") => "that leaf cluster's API server knows a field of the pod's copy (named above) but dropped it when pod sync tried the copy there (a dry run): turn the field's feature gate on in that leaf, leave the field out, or keep the pod off it (nodeAffinity on mcsched.io/cluster)".to_string(),
        "LeafNodeFit" => "a leaf cluster's own nodes cannot take it as they are (the leaf's reasons above): add room in that cluster, or relax the pod".to_string(),
        "SchedulingGates" => "remove the pod's spec.schedulingGates".into(),
        _ => return None,
    };
    Some(text)
}

/// The WHY / NEAREST / WHAT WOULD MAKE IT SCHEDULABLE sections, or empty when the pod fits.
pub fn render(e: &Explanation, facts: &Facts) -> String {
    use console::style;
    let mut out = String::new();
    let gates: Vec<String> = facts
        .pod
        .as_ref()
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.scheduling_gates.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g.name)
        .collect();
    if !gates.is_empty() {
        out.push_str(&format!(
            "\n{} the pod waits for its scheduling gates {}: no scheduler takes it until they are removed from spec.schedulingGates\n",
            style("gated:").yellow().bold(),
            gates.join(", ")
        ));
    }
    let Outcome::Unschedulable { nominated_node, .. } = &e.outcome else {
        return out;
    };
    let groups = groups(e);
    if groups.is_empty() {
        return out;
    }
    out.push_str(&format!("\n{}\n", style("WHY").bold()));
    let width_plugin = groups.iter().map(|g| g.plugin.len()).max().unwrap_or(0);
    for g in &groups {
        let (count, nodes) = if g.nodes == ["all nodes"] {
            ("all nodes".to_string(), String::new())
        } else {
            (
                format!("{} node(s)", g.nodes.len()),
                format!(" ({})", node_list(&g.nodes)),
            )
        };
        out.push_str(&format!(
            "  {count:<11}  {:<wp$}  {}{nodes}\n",
            g.plugin,
            g.reason,
            wp = width_plugin
        ));
    }
    let near = nearest(e);
    if !near.is_empty() {
        out.push_str(&format!("\n{}\n", style("NEAREST").bold()));
        for (node, v) in near.iter().take(5) {
            out.push_str(&format!(
                "  {node}: only {} rejects it ({})\n",
                v.plugin,
                reasons_of(v).join(", ")
            ));
        }
        if near.len() > 5 {
            out.push_str(&format!("  (+{} more)\n", near.len() - 5));
        }
    }
    let mut hints: Vec<String> = Vec::new();
    for g in &groups {
        if let Some(h) = hint(g, facts).filter(|h| !hints.contains(h)) {
            hints.push(h);
        }
    }
    // Room Filter kept for pods an earlier preemption nominated there.
    for n in e
        .nodes
        .iter()
        .filter(|n| !n.feasible && !n.nominated_pods.is_empty())
    {
        hints.push(format!(
            "{}: room is kept for {}, nominated there by preemption with the pod's priority or higher; it frees once they are bound or go elsewhere",
            n.node,
            n.nominated_pods.join(", ")
        ));
    }
    match nominated_node {
        Some(n) => hints.push(format!(
            "preemption nominated node {n}: the pod goes there once the lower-priority victims are gone"
        )),
        None if groups.iter().all(|g| g.unresolvable) => hints.push(
            "preemption cannot help: no rejection would go away by evicting pods".into(),
        ),
        None => {}
    }
    if !hints.is_empty() {
        out.push_str(&format!(
            "\n{}\n",
            style("WHAT WOULD MAKE IT SCHEDULABLE").bold()
        ));
        for h in hints {
            out.push_str(&format!("  - {h}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_shared::explain::NodeExplanation;

    fn verdict(plugin: &str, code: &str, reason: &str) -> PluginVerdict {
        PluginVerdict {
            plugin: plugin.into(),
            code: code.into(),
            reasons: if reason.is_empty() {
                vec![]
            } else {
                vec![reason.into()]
            },
        }
    }

    fn node(name: &str, filters: Vec<PluginVerdict>) -> NodeExplanation {
        NodeExplanation {
            node: name.into(),
            feasible: false,
            filters,
            scores: vec![],
            total_score: None,
            leaf_node: None,
            leaf_ties: None,
            leaf_notes: vec![],
            nominated_pods: vec![],
        }
    }

    fn explanation(nodes: Vec<NodeExplanation>) -> Explanation {
        Explanation {
            pod: "default/big".into(),
            scheduler_name: "mcsched".into(),
            time: "2026-11-23T07:00:00Z".into(),
            outcome: Outcome::Unschedulable {
                message: "0/3 nodes are available".into(),
                nominated_node: None,
                victims: vec![],
            },
            num_all_nodes: nodes.len(),
            num_evaluated_nodes: nodes.len(),
            num_evaluated_virtual_nodes: 0,
            num_feasible_nodes: 0,
            nodes,
            durations: vec![],
            pre_enqueue: vec![],
            pre_filter: vec![],
            permit: vec![],
            extenders: vec![],
            policy: None,
        }
    }

    fn pod(yaml: &str) -> Pod {
        mcsched_shared::yaml::from_str(yaml).expect("pod yaml")
    }

    #[test]
    fn reasons_are_grouped_and_single_blockers_named() {
        console::set_colors_enabled(false);
        let cpu = || verdict("NodeResourcesFit", "Unschedulable", "Insufficient cpu");
        let taint = || {
            verdict(
                "TaintToleration",
                "UnschedulableAndUnresolvable",
                "node(s) had untolerated taint(s)",
            )
        };
        let e = explanation(vec![
            node("node-a", vec![verdict("NodeName", "Success", ""), cpu()]),
            node("node-b", vec![cpu()]),
            node("mcsched-east", vec![taint(), cpu()]),
        ]);
        let g = groups(&e);
        assert_eq!(g[0].reason, "Insufficient cpu");
        assert_eq!(g[0].nodes, ["node-a", "node-b", "mcsched-east"]);
        assert!(!g[0].unresolvable);
        assert_eq!(g[1].plugin, "TaintToleration");
        assert!(g[1].unresolvable);
        let near: Vec<&str> = nearest(&e).iter().map(|(n, _)| *n).collect();
        assert_eq!(near, ["node-a", "node-b"]);

        let facts = Facts {
            pod: Some(pod(
                "metadata: {name: big}\nspec:\n  containers:\n  - name: a\n    resources: {requests: {cpu: '16', memory: 1Gi}}\n",
            )),
            taints: BTreeMap::from([(
                "mcsched-east".to_string(),
                vec![Taint {
                    key: keys::LEAF_TAINT.into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }],
            )]),
        };
        let text = render(&e, &facts);
        assert!(
            text.contains(
                "  3 node(s)    NodeResourcesFit  Insufficient cpu (node-a, node-b, mcsched-east)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("node-a: only NodeResourcesFit rejects it (Insufficient cpu)"),
            "{text}"
        );
        assert!(
            text.contains("lower spec.containers[*].resources.requests.cpu (16), free cpu on node-a, node-b, mcsched-east, or add a node"),
            "{text}"
        );
        assert!(
            text.contains("tolerate mcsched.io/leaf=true:NoSchedule in spec.tolerations"),
            "{text}"
        );
        assert!(!text.contains("preemption cannot help"), "{text}");
    }

    #[test]
    fn unresolvable_everywhere_rules_out_preemption() {
        console::set_colors_enabled(false);
        let e = explanation(vec![node(
            "node-a",
            vec![verdict(
                "NodeAffinity",
                "UnschedulableAndUnresolvable",
                "node(s) didn't match Pod's node affinity/selector",
            )],
        )]);
        let text = render(&e, &Facts::default());
        assert!(text.contains("relax them, or label a node"), "{text}");
        assert!(text.contains("preemption cannot help"), "{text}");
    }

    #[test]
    fn a_field_a_leaf_drops_is_named_with_what_to_do() {
        console::set_colors_enabled(false);
        let reason = "leaf cluster east (v1.37.2) drops spec.volumes[0].emptyDir.mode (its feature gate is off there, or its admission removes it)";
        let e = explanation(vec![node(
            "mcsched-east",
            vec![verdict(
                "LeafNodeFit",
                "UnschedulableAndUnresolvable",
                reason,
            )],
        )]);
        let text = render(&e, &Facts::default());
        assert!(text.contains(reason), "{text}");
        assert!(
            text.contains("turn the field's feature gate on in that leaf, leave the field out, or keep the pod off it"),
            "{text}"
        );
        assert!(!text.contains("add room in that cluster"), "{text}");
    }

    #[test]
    fn a_field_an_older_leaf_does_not_serve_is_named_with_what_to_do() {
        console::set_colors_enabled(false);
        let e = explanation(vec![node(
            "mcsched-east",
            vec![verdict(
                "LeafNodeFit",
                "UnschedulableAndUnresolvable",
                "leaf cluster east (v1.34) does not serve spec.evictionResponders",
            )],
        )]);
        let text = render(&e, &Facts::default());
        assert!(
            text.contains("leaf cluster east (v1.34) does not serve spec.evictionResponders"),
            "{text}"
        );
        assert!(
            text.contains("upgrade the leaf, leave the field out, or keep the pod off it"),
            "{text}"
        );
        assert!(!text.contains("add room in that cluster"), "{text}");
    }

    #[test]
    fn room_kept_for_nominated_pods_is_named() {
        console::set_colors_enabled(false);
        let mut n = node(
            "node-a",
            vec![verdict(
                "NodeResourcesFit",
                "Unschedulable",
                "Insufficient cpu",
            )],
        );
        n.nominated_pods = vec!["default/urgent".into()];
        let text = render(&explanation(vec![n]), &Facts::default());
        assert!(
            text.contains("node-a: room is kept for default/urgent, nominated there by preemption"),
            "{text}"
        );
    }

    #[test]
    fn a_prefilter_rejection_stands_for_all_nodes_and_gates_are_named() {
        console::set_colors_enabled(false);
        let mut e = explanation(vec![]);
        e.pre_filter = vec![verdict(
            "VolumeBinding",
            "UnschedulableAndUnresolvable",
            "pod has unbound immediate PersistentVolumeClaims",
        )];
        let facts = Facts {
            pod: Some(pod(
                "metadata: {name: p}\nspec:\n  schedulingGates: [{name: example.com/quota}]\n  containers: [{name: a}]\n",
            )),
            taints: BTreeMap::new(),
        };
        let text = render(&e, &facts);
        assert!(text.contains("all nodes    VolumeBinding"), "{text}");
        assert!(text.contains("kubectl describe pvc"), "{text}");
        assert!(
            text.contains("scheduling gates example.com/quota"),
            "{text}"
        );
    }

    #[test]
    fn a_scheduled_pod_gets_no_advice() {
        let mut e = explanation(vec![]);
        e.outcome = Outcome::Scheduled {
            node: "node-a".into(),
            leaf_node: None,
        };
        assert_eq!(render(&e, &Facts::default()), "");
    }
}
