//! Leaf-accurate feasibility: a virtual node fits a pod only when one real node of its
//! leaf does, judged by the same filter plugins on the leaf's own snapshot. A summed
//! allocatable hides fragmentation; this does not.

use std::collections::BTreeMap;
use std::sync::Arc;

use rayon::prelude::*;

use super::leaf_devices;
use crate::dra_state::{GIVEN_CLAIMS_KEY, ResourceClaims};
use crate::framework::runtime::{PARALLEL_MIN_NODES, num_feasible_nodes_to_find};
use crate::framework::{CycleState, Plugin, Status};
use crate::leaf::admission::Admitted;
use crate::leaf::check_memory::Asker;
use crate::leaf::cycle::{LeafCandidates, LeafCycle, LeafView};
use crate::leaf::grants::{Copied, grant_command};
use crate::leaf::kept_fields;
use crate::leaf::leaf_checks::{Question, Synced};
use crate::leaf::node_search::{Rotation, search};
use crate::leaf::rescheduling::Avoided;
use crate::leaf::served_fields::{self, Served};
use crate::plugins::{
    dynamic_resources, inter_pod_affinity, node_affinity, node_declared_features, node_ports,
    node_resources_fit, node_unschedulable, pod_topology_spread, taint_toleration, volume_binding,
};
use crate::snapshot::{NodeInfo, PodInfo};

/// The filter plugins that judge a leaf node, as the leaf's scheduler will: those whose
/// subject is the node, and inter-pod affinity and spreading among the leaf's own pods
/// for what the copy keeps of them (node-level terms, see
/// [`crate::leaf::transform::leaf_pod`]) and for the leaf pods' anti-affinity towards it.
/// TaintToleration here is the plain one, as leaf nodes' taints are real; VolumeBinding
/// judges the pod's claims as the leaf will hold them (see [`super::leaf_claims`]);
/// DynamicResources allocates the copy's claims (see [`super::leaf_devices`]) from the
/// leaf's ResourceSlices, beside the claims holding devices there; NodeDeclaredFeatures
/// wants the leaf node to declare what the copy needs (the virtual node declares what any
/// of them does).
pub(crate) struct LeafChecker {
    plugins: Vec<Arc<dyn Plugin>>,
    rotation: Rotation,
    /// The host's claims, which the copy's are made from.
    host_claims: Arc<ResourceClaims>,
}

impl LeafChecker {
    /// `fit`: the profile's NodeResourcesFit, so its pluginConfig (ignored resources)
    /// holds in leaves too; NodeAffinity's addedAffinity aims at host nodes and does not.
    pub(crate) fn new(fit: Option<Arc<dyn Plugin>>) -> Self {
        let fit = fit.unwrap_or_else(|| {
            Arc::new(node_resources_fit::NodeResourcesFit::new(Default::default()))
        });
        LeafChecker {
            plugins: vec![
                Arc::new(node_unschedulable::NodeUnschedulable),
                Arc::new(taint_toleration::TaintToleration),
                Arc::new(node_affinity::NodeAffinity::new(None)),
                Arc::new(node_ports::NodePorts),
                fit,
                Arc::new(inter_pod_affinity::InterPodAffinity::new(Default::default())),
                // No default constraints: the leaf's own are soft, so never refuse.
                Arc::new(pod_topology_spread::PodTopologySpread::new(
                    pod_topology_spread::PodTopologySpreadArgs {
                        defaulting_type: pod_topology_spread::DefaultingType::List,
                        default_constraints: Vec::new(),
                    },
                )),
                // Only PreFilter and Filter run here: the volumes Filter picks on the
                // chosen leaf node are held by the leaf registry once the pod is sent.
                Arc::new(volume_binding::VolumeBinding::new(0)),
                Arc::new(Self::dynamic_resources(Default::default())),
                // Last, as in kube's default order: the leaf node must declare every
                // feature the copy's spec needs.
                Arc::new(node_declared_features::NodeDeclaredFeatures::default()),
            ],
            rotation: Rotation::default(),
            host_claims: ResourceClaims::new(),
        }
    }

    /// The leaf check's DynamicResources: the claims it judges and the devices they
    /// hold are given per leaf, so its own tracker stays empty.
    fn dynamic_resources(
        args: dynamic_resources::DynamicResourcesArgs,
    ) -> dynamic_resources::DynamicResources {
        dynamic_resources::DynamicResources::new(args, ResourceClaims::new())
    }

    /// The host's claims, and the profile's DynamicResourcesArgs (its filterTimeout
    /// bounds a leaf's allocation too).
    pub(crate) fn with_devices(
        mut self,
        host_claims: Arc<ResourceClaims>,
        args: dynamic_resources::DynamicResourcesArgs,
    ) -> Self {
        for p in &mut self.plugins {
            if p.name() == dynamic_resources::NAME {
                *p = Arc::new(Self::dynamic_resources(args));
            }
        }
        self.host_claims = host_claims;
        self
    }

    /// Success when some node of `node`'s leaf can run `pod` (recorded in `cycle`),
    /// else Unschedulable with the leaf's reasons and its largest free node.
    pub(crate) fn check(&self, cycle: &LeafCycle, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(cluster) = node.cluster.as_deref() else {
            return Status::success();
        };
        if !cycle.avoid.is_empty()
            && let Some(why) = cycle
                .avoid
                .get(&crate::leaf::rescheduling::owner_key(&pod.object()))
                .and_then(|cs| cs.iter().find(|(c, _)| c == cluster).map(|(_, why)| why))
        {
            return Status::unschedulable(match why {
                Avoided::Pending => format!(
                    "leaf cluster {cluster} is avoided for a while: this owner's pods stayed Pending there"
                ),
                Avoided::Refused => format!(
                    "leaf cluster {cluster} is avoided for a while: it refused this owner's pods"
                ),
            });
        }
        if let Some(refused) = copies_unreadable(cycle, pod) {
            return refused;
        }
        let Some(view) = cycle.views.get(cluster) else {
            return Status::unschedulable(match cycle.unsynced.get(cluster) {
                // A watch the leaf forbids never lists: a leaf joined by an older
                // `join`, whose reader role lacks a kind read now.
                Some(kinds) => format!(
                    "leaf cluster {cluster} is not synced yet: waiting for the first list of {} (if the agent's logs show them forbidden, re-run `kubectl mcsched join cluster {cluster}`)",
                    kinds
                        .iter()
                        .map(|k| k.trim_start_matches("leaf "))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => format!("leaf cluster {cluster} is not connected to the agent"),
            });
        };
        if let Some(refused) = leaf_refuses(view, pod) {
            return refused;
        }
        let mut notes: Vec<String> = service_account_note(view, pod).into_iter().collect();
        let vn_labels = node.node.metadata.labels.clone().unwrap_or_default();
        let (leaf_pod, overridden) = match cycle.leaf_pod_in(pod, cluster, &vn_labels) {
            Ok((p, changed)) => {
                notes.extend(changed.iter().cloned());
                (p, changed)
            }
            Err(e) => return Status::unresolvable(format!("leaf cluster {cluster}: {e}")),
        };
        match &view.served {
            Served::Known(fields) => {
                if let Some(path) = cycle.unserved_field(cluster, &leaf_pod, fields) {
                    let mut why = served_fields::not_served(cluster, fields.git_version(), &path);
                    if !overridden.is_empty() {
                        why = format!("{why} (judged as {})", overridden.join("; "));
                    }
                    return Status::unresolvable(why);
                }
            }
            Served::Unreadable(reason) => notes.push(format!(
                "the fields leaf cluster {cluster} serves are unknown ({reason}): the copy is not checked for them; pod sync creates it with strict field validation, so the leaf refuses a field it does not serve rather than drop it"
            )),
            Served::NotRead => {}
        }
        if let Some((path, version)) = cycle.dropped_field(&leaf_pod, &view.kept) {
            let mut why = kept_fields::drops(cluster, &version, &path);
            if !overridden.is_empty() {
                why = format!("{why} (judged as {})", overridden.join("; "));
            }
            return Status::unresolvable(why);
        }
        let obj = pod.object();
        let class = obj
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref());
        let leaf_pod =
            match view
                .admission
                .rules
                .admit(&leaf_pod.object(), class, &view.admission.pending)
            {
                Admitted::AsIs => leaf_pod,
                Admitted::Defaulted(p) => Arc::new(PodInfo::new(Arc::new(*p))),
                Admitted::OverQuota(why) => {
                    return Status::unschedulable(format!(
                        "leaf cluster {cluster} would refuse the copy: {why}"
                    ));
                }
                Admitted::OutOfLimits(why) => {
                    return Status::unresolvable(format!(
                        "leaf cluster {cluster} would refuse the copy: {why}"
                    ));
                }
                Admitted::Forbidden(why) => {
                    return Status::unresolvable(format!("leaf cluster {cluster}: {why}"));
                }
            };
        let (leaf_pod, snapshot) = match super::leaf_claims::leaf_view(
            &cycle.host_volumes,
            &leaf_pod,
            &view.snapshot,
            &|class| cycle.leaf_class(cluster, &vn_labels, class),
        ) {
            Ok(v) => v,
            Err(e) => return Status::unschedulable(format!("leaf cluster {cluster}: {e}")),
        };
        let mut state = CycleState::new();
        if leaf_devices::has_claims(&obj) {
            if let Some(why) = &view.devices.unreadable {
                return Status::unschedulable(format!("leaf cluster {cluster}: {why}"));
            }
            match leaf_devices::given_claims(&self.host_claims, &obj, &view.devices) {
                Ok(given) => state.write(GIVEN_CLAIMS_KEY, given),
                Err(e) => return Status::unresolvable(format!("leaf cluster {cluster}: {e}")),
            }
        }
        for p in &self.plugins {
            let Some(pf) = p.as_pre_filter() else {
                continue;
            };
            let (_, s) = pf.pre_filter(&mut state, &leaf_pod, &snapshot);
            if s.is_skip() {
                state.skip_filter(p.name());
            } else if !s.is_success() {
                return Status::new(
                    s.code,
                    vec![format!("leaf cluster {cluster}: {}", s.message()).into()],
                );
            }
        }
        let filters: Vec<_> = self
            .plugins
            .iter()
            .filter(|p| !state.skips_filter(p.name()))
            .filter_map(|p| p.as_filter())
            .collect();
        let run = |n: &Arc<NodeInfo>| {
            filters
                .iter()
                .map(|f| f.filter(&state, &leaf_pod, n))
                .find(|s| !s.is_success())
        };
        let nodes = &snapshot.nodes;
        // In parallel only for a large leaf and on the cycle's pool (a cycle too small for
        // the pool runs here, and rayon would wake its global pool besides): handing a
        // walk that usually stops at a leaf's first nodes to the pool cost more than the
        // walk: the pool's threads switch and yield (measured in bench/analysis.md).
        let parallel = nodes.len() >= PARALLEL_MIN_NODES && rayon::current_thread_index().is_some();
        // The leaf nodes that fit, as kube's Filter finds them: the leaf's share of the
        // cycle's sample of one flat cluster of all the nodes, from where the leaf's last
        // search stopped (numFeasibleNodesToFind of the leaf's own from its first node
        // when the cycle is not sampled). Score weighs the virtual node as the best, and
        // counts how many are as good.
        let n = nodes.len();
        let (want, start) = match cycle.leaf_share(n) {
            Some(share) => (share, self.rotation.start(cluster, n)),
            None => (num_feasible_nodes_to_find(None, n), 0),
        };
        let searched = search(n, start, want, parallel, |p| {
            run(&nodes[p as usize]).is_none()
        });
        if want < n {
            self.rotation.advance(cluster, searched.processed, n);
        }
        let found = searched.positions;
        if let Some(&first) = found.first() {
            let leaf_node = &nodes[first as usize].name;
            let volumes = volume_binding::chosen_volumes(&state, leaf_node);
            let devices = leaf_devices::chosen(&state, leaf_node);
            cycle.record_choice(&node.name, cluster, leaf_node, volumes, notes, devices);
            cycle.record_candidates(
                &node.name,
                LeafCandidates {
                    cluster: cluster.to_string(),
                    snapshot: snapshot.clone(),
                    leaf_pod: leaf_pod.clone(),
                    positions: found,
                    state,
                },
            );
            return Status::success();
        }
        let rejections: Vec<Status> = if parallel {
            nodes.par_iter().filter_map(run).collect()
        } else {
            nodes.iter().filter_map(run).collect()
        };
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for s in rejections {
            for r in s.reasons {
                *counts.entry(r.into_owned()).or_default() += 1;
            }
        }
        let mut why = rejection(cluster, nodes, &counts);
        // The copy judged is the overridden one: say so, or the reason reads as the pod's.
        if !overridden.is_empty() {
            why = format!("{why} (judged as {})", overridden.join("; "));
        }
        Status::unschedulable(why)
    }
}

/// A pod whose ConfigMaps or Secrets the agent may not read cannot be copied into any
/// leaf: UnschedulableAndUnresolvable with the grant to add, or Unschedulable while the
/// API server is still being asked (the answer is a leaf event that retries the pod).
fn copies_unreadable(cycle: &LeafCycle, pod: &PodInfo) -> Option<Status> {
    let deps = crate::leaf::transform::dependencies(&pod.object());
    let access = &cycle.access.0;
    for (kind, names, label) in [
        (Copied::ConfigMaps, &deps.config_maps, "ConfigMaps"),
        (Copied::Secrets, &deps.secrets, "Secrets"),
    ] {
        if names.is_empty() {
            continue;
        }
        let ns = &pod.namespace;
        match access.may_read(ns, kind) {
            Some(true) => {}
            Some(false) => {
                return Some(Status::unresolvable(format!(
                    "the agent may not read {label} in namespace {ns}, which pod sync copies into the leaf ({}): {}",
                    names.join(", "),
                    grant_command(kind, ns, access.agent_namespace())
                )));
            }
            None => {
                return Some(Status::unschedulable(format!(
                    "checking whether the agent may read {label} in namespace {ns}"
                )));
            }
        }
    }
    None
}

/// What the leaf check asks a leaf about `pod`: its namespace's grant, and each object
/// of the pod's names the copy would need.
fn questions(pod: &PodInfo) -> Vec<Question> {
    let ns = &pod.namespace;
    let deps = crate::leaf::transform::dependencies(&pod.object());
    let mut qs = vec![Question::Granted(ns.clone())];
    if let Some(sa) = crate::leaf::transform::service_account(&pod.object()) {
        qs.push(Question::ServiceAccount(ns.clone(), sa.to_string()));
        qs.push(Question::MayCreateServiceAccounts(ns.clone()));
    }
    qs.extend(
        deps.config_maps
            .iter()
            .map(|n| (Synced::ConfigMap, n))
            .chain(deps.secrets.iter().map(|n| (Synced::Secret, n)))
            .chain(deps.claims.iter().map(|n| (Synced::Claim, n)))
            .chain(
                deps.claim_templates
                    .iter()
                    .map(|n| (Synced::ResourceClaimTemplate, n)),
            )
            .chain(
                deps.resource_claims
                    .iter()
                    .map(|n| (Synced::ResourceClaim, n)),
            )
            .map(|(kind, n)| Question::Foreign(kind, ns.clone(), n.clone())),
    );
    qs
}

/// The first leaf still being asked something about `pod` (every question is sent
/// now), so that the pod waits for the answers instead of going elsewhere for lack of
/// them; the answers are leaf events that retry it.
pub(crate) fn unanswered(cycle: &LeafCycle, pod: &PodInfo, asker: Asker) -> Option<String> {
    let qs = questions(pod);
    let mut waiting = None;
    for view in cycle.views.values() {
        let unknown = qs
            .iter()
            .filter(|q| view.checks.want(q, asker).is_none())
            .count();
        if unknown > 0 && waiting.is_none() {
            waiting = Some(format!(
                "asking leaf cluster {} whether it grants namespace {} and holds objects of the pod's names",
                view.cluster, pod.namespace
            ));
        }
    }
    waiting
}

/// What the leaf's admin and owner decide: the pod's namespace must be granted to
/// mcsched there, and no object the copy needs (the pod itself, its ConfigMaps, Secrets
/// and claims) may exist there without this host's mark. PreFilter waits for the answers
/// ([`unanswered`]); pod sync checks again before it writes, and what it finds is known
/// here from then on.
fn leaf_refuses(view: &LeafView, pod: &PodInfo) -> Option<Status> {
    let cluster = &view.cluster;
    let ns = &pod.namespace;
    if mcsched_shared::keys::is_protected_leaf_namespace(ns) {
        return Some(Status::unresolvable(format!(
            "namespace {ns} is a system namespace: mcsched never sends pods to it in a leaf cluster, whatever the leaf grants"
        )));
    }
    if view.checks.answer(&Question::Granted(ns.clone())) == Some(false) {
        return Some(Status::unresolvable(format!(
            "leaf cluster {cluster} has not granted namespace {ns} to mcsched: its admin adds it with `kubectl mcsched join cluster {cluster} --namespaces <granted namespaces>,{ns}`"
        )));
    }
    let foreign_pod = view
        .snapshot
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .any(|p| {
            p.key == pod.key && !crate::leaf::leaf_checks::is_ours(&p.meta, cluster, &view.host_id)
        });
    if foreign_pod {
        return Some(Status::unresolvable(format!(
            "leaf cluster {cluster} has a pod {} that this host's mcsched did not create; it is left alone",
            pod.key
        )));
    }
    for q in questions(pod) {
        if let Question::Foreign(kind, _, name) = &q
            && view.checks.answer(&q) == Some(true)
        {
            return Some(Status::unresolvable(format!(
                "leaf cluster {cluster} has a {} {ns}/{name} that this host's mcsched did not create: the pod is not sent there, so that it neither uses nor overwrites it",
                kind.kind()
            )));
        }
    }
    if let Some(sa) = crate::leaf::transform::service_account(&pod.object()) {
        let has = view
            .checks
            .answer(&Question::ServiceAccount(ns.clone(), sa.to_string()));
        let may_create = view
            .checks
            .answer(&Question::MayCreateServiceAccounts(ns.clone()));
        if has == Some(false) && may_create == Some(false) {
            return Some(Status::unresolvable(format!(
                "leaf cluster {cluster} has no ServiceAccount {ns}/{sa} and mcsched may not create one there: the leaf's admin creates it, or lets mcsched with `kubectl mcsched join cluster {cluster} --service-accounts`"
            )));
        }
    }
    None
}

/// Which ServiceAccount the copy would run as in the leaf: the one of that name there, or
/// one pod sync creates ([`leaf_refuses`] refused the leaf when neither).
fn service_account_note(view: &LeafView, pod: &PodInfo) -> Option<String> {
    let obj = pod.object();
    let sa = crate::leaf::transform::service_account(&obj)?;
    let ns = &pod.namespace;
    let has = view
        .checks
        .answer(&Question::ServiceAccount(ns.clone(), sa.to_string()));
    Some(match has {
        Some(false) => {
            format!("ServiceAccount {ns}/{sa}: the leaf has none; pod sync creates it (no RBAC)")
        }
        _ => format!("ServiceAccount {ns}/{sa}: the leaf has it"),
    })
}

/// `leaf cluster east has no node that fits: 4 Insufficient cpu; largest free node
/// east-2 (cpu 2, memory 3Gi, pods 107)`.
fn rejection(cluster: &str, nodes: &[Arc<NodeInfo>], counts: &BTreeMap<String, usize>) -> String {
    let mut reasons: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    reasons.sort();
    let mut msg = format!("leaf cluster {cluster} has no node that fits");
    if !reasons.is_empty() {
        msg.push_str(": ");
        msg.push_str(&reasons.join(", "));
    }
    let free = |n: &NodeInfo| {
        (
            n.allocatable
                .milli_cpu
                .saturating_sub(n.requested.milli_cpu),
            n.allocatable.memory.saturating_sub(n.requested.memory),
        )
    };
    if let Some(best) = nodes
        .iter()
        .filter(|n| !n.unschedulable)
        .max_by(|a, b| free(a).cmp(&free(b)).then_with(|| b.name.cmp(&a.name)))
    {
        let (cpu, mem) = free(best);
        msg.push_str(&format!(
            "; largest free node {} (cpu {}, memory {}, pods {})",
            best.name,
            format_cpu(cpu),
            format_bytes(mem),
            best.allocatable
                .allowed_pods
                .saturating_sub(best.pods.len() as i64)
        ));
    }
    msg
}

fn format_cpu(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

fn format_bytes(b: i64) -> String {
    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;
    if b != 0 && b % GI == 0 {
        format!("{}Gi", b / GI)
    } else if b.abs() >= MI {
        format!("{}Mi", b / MI)
    } else {
        b.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf::cycle::LeafView;
    use crate::snapshot::{Snapshot, VolumeObjects};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn node(name: &str, cpu: &str, labels: serde_json::Value) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn pod(name: &str, cpu: &str, node: Option<&str>, annotations: serde_json::Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    /// Four leaf nodes of 4 CPU with 2 used on each: 8 CPU free in all, 2 per node.
    fn fragmented_leaf() -> LeafCycle {
        let nodes: Vec<Arc<NodeInfo>> = (1..=4)
            .map(|i| {
                let name = format!("east-{i}");
                let mut n = node(&name, "4", json!({"disk": if i == 3 {"ssd"} else {"hdd"}}));
                n.add_pod(Arc::new(pod(
                    &format!("busy-{i}"),
                    "2",
                    Some(&name),
                    json!({}),
                )));
                Arc::new(n)
            })
            .collect();
        let view = LeafView {
            admission: Default::default(),
            cluster: "east".into(),
            snapshot: Snapshot::from_nodes(nodes),
            checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
            host_id: String::new(),
            served: Default::default(),
            kept: Default::default(),
            devices: Default::default(),
        };
        LeafCycle::new(Arc::new(BTreeMap::from([(
            "east".to_string(),
            Arc::new(view),
        )])))
    }

    fn virtual_node() -> NodeInfo {
        node("mcsched-east", "8", json!({"mcsched.io/cluster": "east"}))
    }

    #[test]
    fn a_pod_larger_than_every_leaf_node_is_refused_despite_the_summed_allocatable() {
        let checker = LeafChecker::new(None);
        let cycle = fragmented_leaf();
        let s = checker.check(&cycle, &pod("big", "3", None, json!({})), &virtual_node());
        assert!(!s.is_success());
        assert_eq!(
            s.message(),
            "leaf cluster east has no node that fits: 4 Insufficient cpu; \
             largest free node east-1 (cpu 2, memory 8Gi, pods 109)"
        );
        assert_eq!(cycle.choice("mcsched-east"), None);
    }

    #[test]
    fn a_pod_that_fits_one_leaf_node_passes_and_names_it() {
        let checker = LeafChecker::new(None);
        let cycle = fragmented_leaf();
        let ssd = json!({"mcsched.io/leaf-node-selector": "{\"disk\":\"ssd\"}"});
        let s = checker.check(&cycle, &pod("small", "2", None, ssd), &virtual_node());
        assert!(s.is_success(), "{s:?}");
        assert_eq!(cycle.choice("mcsched-east").as_deref(), Some("east-3"));
    }

    /// Leaf `east` with one 4-CPU node per entry, each declaring its features.
    fn leaf_declaring(nodes: &[(&str, &[&str])]) -> LeafCycle {
        let nodes = nodes
            .iter()
            .map(|(name, features)| {
                let n: Node = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "declaredFeatures": features}
                }))
                .expect("node");
                Arc::new(NodeInfo::new(Arc::new(n)))
            })
            .collect();
        LeafCycle::new(Arc::new(BTreeMap::from([(
            "east".to_string(),
            Arc::new(LeafView {
                admission: Default::default(),
                cluster: "east".into(),
                snapshot: Snapshot::from_nodes(nodes),
                checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
                host_id: String::new(),
                served: Default::default(),
                kept: Default::default(),
                devices: Default::default(),
            }),
        )])))
    }

    #[test]
    fn a_pod_needing_a_feature_goes_only_to_a_leaf_node_declaring_it() {
        let checker = LeafChecker::new(None);
        let vn = virtual_node();
        // On the host network in a user namespace: UserNamespacesHostNetworkSupport.
        let needy: Pod = serde_json::from_value(json!({
            "metadata": {"name": "needy", "namespace": "default"},
            "spec": {"hostNetwork": true, "hostUsers": false,
                "containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        let needy = PodInfo::new(Arc::new(needy));
        let leaf = || {
            leaf_declaring(&[
                ("east-1", &["RestartAllContainersOnContainerExits"]),
                (
                    "east-2",
                    &[
                        "RestartAllContainersOnContainerExits",
                        "UserNamespacesHostNetworkSupport",
                    ],
                ),
            ])
        };
        let cycle = leaf();
        let s = checker.check(&cycle, &needy, &vn);
        assert!(s.is_success(), "{s}");
        assert_eq!(cycle.choice("mcsched-east").as_deref(), Some("east-2"));
        // A pod needing nothing takes the first node.
        let cycle = leaf();
        let s = checker.check(&cycle, &pod("plain", "1", None, json!({})), &vn);
        assert!(s.is_success(), "{s}");
        assert_eq!(cycle.choice("mcsched-east").as_deref(), Some("east-1"));
        // No leaf node declares it: refused, the reason counted as the leaf's others are.
        let cycle = leaf_declaring(&[
            ("east-1", &["RestartAllContainersOnContainerExits"]),
            ("east-2", &[]),
        ]);
        let s = checker.check(&cycle, &needy, &vn);
        assert_eq!(
            s.message(),
            "leaf cluster east has no node that fits: \
             2 node(s) didn't match Pod's required features; \
             largest free node east-1 (cpu 4, memory 8Gi, pods 110)"
        );
        assert_eq!(cycle.choice("mcsched-east"), None);
    }

    /// Leaf `east` with one 4-CPU node, its API server serving `served`.
    fn leaf_serving(served: Served) -> LeafCycle {
        leaf_keeping(served, Default::default())
    }

    /// As [`leaf_serving`], with what pod sync's dry runs found it keeps and drops.
    fn leaf_keeping(served: Served, kept: Arc<kept_fields::KeptFields>) -> LeafCycle {
        let n = node("east-1", "4", json!({"kubernetes.io/hostname": "east-1"}));
        LeafCycle::new(Arc::new(BTreeMap::from([(
            "east".to_string(),
            Arc::new(LeafView {
                admission: Default::default(),
                cluster: "east".into(),
                snapshot: Snapshot::from_nodes(vec![Arc::new(n)]),
                checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
                host_id: String::new(),
                served,
                kept,
                devices: Default::default(),
            }),
        )])))
    }

    #[test]
    fn a_copy_carrying_a_field_its_leaf_was_found_to_drop_does_not_go_there() {
        use crate::leaf::served_fields::fixtures;
        let checker = LeafChecker::new(None);
        let vn = virtual_node();
        let with_mode = |volumes: serde_json::Value| {
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"containers": [{"name": "a", "image": "i",
                    "resources": {"requests": {"cpu": "1"}}}], "volumes": volumes}
            }))
            .expect("pod");
            PodInfo::new(Arc::new(p))
        };
        // A v1.37 leaf serves emptyDir's mode; a dry run there found it dropped.
        let kept = Arc::new(kept_fields::KeptFields::default());
        let now = std::time::Instant::now();
        kept.dropped(
            "v1.37.2",
            &kept_fields::dropped(
                &json!({"spec": {"volumes": [{"name": "d", "emptyDir": {"mode": 448}}]}}),
                &json!({"spec": {"volumes": [{"name": "d", "emptyDir": {}}]}}),
            ),
            now,
        );
        let cycle = leaf_keeping(Served::Known(Arc::new(fixtures::served(37))), kept.clone());
        let pod = with_mode(json!([{"name": "cache", "emptyDir": {}},
            {"name": "data", "emptyDir": {"mode": 493}}]));
        let s = checker.check(&cycle, &pod, &vn);
        assert_eq!(s.code, crate::framework::Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "leaf cluster east (v1.37.2) drops spec.volumes[1].emptyDir.mode (its feature gate is off there, or its admission removes it)"
        );
        assert_eq!(cycle.choice("mcsched-east"), None);
        // A pod without it goes there; with the leaf's memory forgotten (another
        // version), the pod too.
        let plain = with_mode(json!([{"name": "cache", "emptyDir": {}}]));
        let cycle = leaf_keeping(Served::Known(Arc::new(fixtures::served(37))), kept.clone());
        assert!(checker.check(&cycle, &plain, &vn).is_success());
        kept.at_version("v1.37.3", now);
        let cycle = leaf_keeping(Served::Known(Arc::new(fixtures::served(37))), kept);
        assert!(checker.check(&cycle, &pod, &vn).is_success());
    }

    #[test]
    fn a_copy_carrying_a_field_its_leaf_does_not_serve_does_not_go_there() {
        use crate::leaf::served_fields::fixtures;
        let checker = LeafChecker::new(None);
        let vn = virtual_node();
        // v1.37's emptyDir mode on the second volume.
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "1"}}},
                {"name": "b", "image": "j", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}
            ], "volumes": [
                {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "data", "emptyDir": {"mode": 448}}
            ]}
        }))
        .expect("pod");
        let pod = PodInfo::new(Arc::new(p));
        let v1_34 = Served::Known(Arc::new(fixtures::served(34)));
        let cycle = leaf_serving(v1_34.clone());
        let s = checker.check(&cycle, &pod, &vn);
        assert_eq!(s.code, crate::framework::Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "leaf cluster east (v1.34) does not serve spec.volumes[1].emptyDir.mode"
        );
        assert_eq!(
            s.message(),
            served_fields::not_served("east", "v1.34.4", "spec.volumes[1].emptyDir.mode")
        );
        assert_eq!(cycle.choice("mcsched-east"), None);
        // Judged once per cycle: asked again, the same answer.
        assert_eq!(checker.check(&cycle, &pod, &vn).message(), s.message());

        // A v1.37 leaf serves it; a v1.34 leaf takes a pod without it.
        let cycle = leaf_serving(Served::Known(Arc::new(fixtures::served(37))));
        let s = checker.check(&cycle, &pod, &vn);
        assert!(s.is_success(), "{s}");
        assert_eq!(cycle.choice("mcsched-east").as_deref(), Some("east-1"));
        let mut plain = (*pod.pod()).clone();
        if let Some(v) = plain
            .spec
            .as_mut()
            .and_then(|s| s.volumes.as_mut())
            .and_then(|v| v.get_mut(1))
        {
            v.empty_dir = Some(Default::default());
        }
        let cycle = leaf_serving(v1_34);
        let s = checker.check(&cycle, &PodInfo::new(Arc::new(plain)), &vn);
        assert!(s.is_success(), "{s}");

        // Unreadable: judged as before, and said so; never read: as before, silently.
        let cycle = leaf_serving(Served::Unreadable(
            "/openapi/v3/api/v1 is larger than 16777216 bytes".into(),
        ));
        let s = checker.check(&cycle, &pod, &vn);
        assert!(s.is_success(), "{s}");
        let notes = cycle.notes();
        assert!(
            notes["mcsched-east"].iter().any(|n| n.starts_with(
                "the fields leaf cluster east serves are unknown (/openapi/v3/api/v1 is larger than 16777216 bytes)"
            )),
            "{notes:?}"
        );
        let cycle = leaf_serving(Served::NotRead);
        assert!(checker.check(&cycle, &pod, &vn).is_success());
        assert!(cycle.notes().is_empty());
    }

    #[test]
    fn an_unknown_leaf_is_unschedulable_not_an_error() {
        let checker = LeafChecker::new(None);
        let cycle = LeafCycle::default();
        let s = checker.check(&cycle, &pod("p", "1", None, json!({})), &virtual_node());
        assert_eq!(
            s.message(),
            "leaf cluster east is not connected to the agent"
        );
    }

    /// Leaf `east` with nodes east-1 and east-2, class `local` of `mode` when given, and
    /// a local volume on east-2 when `volume`; the host holds the pod's unbound claim.
    fn leaf_with_storage(mode: Option<&str>, volume: bool) -> LeafCycle {
        let nodes = ["east-1", "east-2"]
            .map(|n| Arc::new(node(n, "4", json!({"kubernetes.io/hostname": n}))))
            .to_vec();
        let mut snapshot = Snapshot::from_nodes(nodes);
        let mut leaf_volumes = VolumeObjects::default();
        if let Some(mode) = mode {
            let sc: k8s_openapi::api::storage::v1::StorageClass = serde_json::from_value(json!({
                "metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": mode
            }))
            .expect("class");
            leaf_volumes
                .storage_classes
                .insert("local".into(), Arc::new(sc));
        }
        if volume {
            let pv: k8s_openapi::api::core::v1::PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": "pv-east-2"},
                "spec": {"storageClassName": "local", "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["east-2"]}]}]}}},
                "status": {"phase": "Available"}
            }))
            .expect("pv");
            leaf_volumes
                .volumes
                .insert("pv-east-2".into(), Arc::new(pv));
        }
        snapshot.volumes = Arc::new(leaf_volumes);
        let mut cycle = LeafCycle::new(Arc::new(BTreeMap::from([(
            "east".to_string(),
            Arc::new(LeafView {
                admission: Default::default(),
                cluster: "east".into(),
                snapshot,
                checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
                host_id: String::new(),
                served: Default::default(),
                kept: Default::default(),
                devices: Default::default(),
            }),
        )])));
        let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim =
            serde_json::from_value(json!({
                "metadata": {"name": "data", "namespace": "default"},
                "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "5Gi"}}}
            }))
            .expect("claim");
        let mut host = VolumeObjects::default();
        host.claims.insert("default/data".into(), Arc::new(claim));
        cycle.host_volumes = Arc::new(host);
        cycle
    }

    fn pod_with_claim() -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn a_claim_goes_only_to_a_leaf_that_can_bind_it() {
        let checker = LeafChecker::new(None);
        let vn = virtual_node();

        // A volume on east-2: the check passes and picks the node the volume is on.
        let cycle = leaf_with_storage(Some("WaitForFirstConsumer"), true);
        let s = checker.check(&cycle, &pod_with_claim(), &vn);
        assert!(s.is_success(), "{s:?}");
        assert_eq!(cycle.choice("mcsched-east").as_deref(), Some("east-2"));

        // The class but no volume and no provisioner.
        let cycle = leaf_with_storage(Some("WaitForFirstConsumer"), false);
        let s = checker.check(&cycle, &pod_with_claim(), &vn);
        assert_eq!(
            s.message(),
            "leaf cluster east has no node that fits: \
             2 node(s) didn't find available persistent volumes to bind; \
             largest free node east-1 (cpu 4, memory 8Gi, pods 110)"
        );

        // No such class in the leaf.
        let cycle = leaf_with_storage(None, false);
        let s = checker.check(&cycle, &pod_with_claim(), &vn);
        assert_eq!(
            s.message(),
            "leaf cluster east: storageclass.storage.k8s.io \"local\" not found \
             for persistentvolumeclaim \"data\""
        );

        // An Immediate class there: the leaf binds the copy on creation; not judged here.
        let cycle = leaf_with_storage(Some("Immediate"), false);
        let s = checker.check(&cycle, &pod_with_claim(), &vn);
        assert!(s.is_success(), "{s:?}");

        // A generic ephemeral volume: its claim is made in the leaf for the leaf's pod, so
        // its absence there now is no refusal.
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "scratch", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                "volumes": [{"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}}}]}
        }))
        .expect("pod");
        let cycle = leaf_with_storage(Some("WaitForFirstConsumer"), false);
        let s = checker.check(&cycle, &PodInfo::new(Arc::new(p)), &vn);
        assert!(s.is_success(), "{s:?}");
    }

    /// Leaf `east` with one 4-CPU node running `resident`, and `admission` as its rules.
    fn one_node_leaf(
        resident: serde_json::Value,
        admission: crate::leaf::admission::LeafAdmission,
    ) -> LeafCycle {
        let mut n = node("east-1", "4", json!({"kubernetes.io/hostname": "east-1"}));
        let p: Pod = serde_json::from_value(resident).expect("resident");
        n.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        LeafCycle::new(Arc::new(BTreeMap::from([(
            "east".to_string(),
            Arc::new(LeafView {
                admission: crate::leaf::cycle::AdmissionView {
                    rules: Arc::new(admission),
                    pending: Arc::default(),
                },
                cluster: "east".into(),
                snapshot: Snapshot::from_nodes(vec![Arc::new(n)]),
                checks: crate::leaf::leaf_checks::LeafChecks::settled("east"),
                host_id: String::new(),
                served: Default::default(),
                kept: Default::default(),
                devices: Default::default(),
            }),
        )])))
    }

    fn labelled(name: &str, labels: serde_json::Value, affinity: serde_json::Value) -> PodInfo {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"affinity": affinity, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn leaf_pods_count_for_inter_pod_anti_affinity_both_ways() {
        let checker = LeafChecker::new(None);
        let db = json!({"metadata": {"name": "db", "namespace": "default", "labels": {"app": "db"}},
            "spec": {"nodeName": "east-1", "containers": [{"name": "c", "image": "i"}]}});
        let away_from_db = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}});
        // One cycle per pod, as the scheduler runs them (the copy is built once per cycle).
        let cycle = one_node_leaf(db.clone(), Default::default());
        let s = checker.check(
            &cycle,
            &labelled("web", json!({"app": "web"}), away_from_db),
            &virtual_node(),
        );
        assert_eq!(
            s.message(),
            "leaf cluster east has no node that fits: 1 node(s) didn't match pod anti-affinity rules; \
             largest free node east-1 (cpu 4, memory 8Gi, pods 109)"
        );
        let cycle = one_node_leaf(db, Default::default());
        let s = checker.check(
            &cycle,
            &labelled("web", json!({"app": "web"}), json!({})),
            &virtual_node(),
        );
        assert!(s.is_success(), "{s}");

        // A leaf pod that keeps `app: web` off its node refuses the copy too.
        let lonely = json!({"metadata": {"name": "lonely", "namespace": "default"},
            "spec": {"nodeName": "east-1", "containers": [{"name": "c", "image": "i"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}}}});
        let cycle = one_node_leaf(lonely, Default::default());
        let s = checker.check(
            &cycle,
            &labelled("web", json!({"app": "web"}), json!({})),
            &virtual_node(),
        );
        assert!(
            s.message()
                .contains("1 node(s) didn't satisfy existing pods anti-affinity rules"),
            "{s}"
        );
        // A wider topology was the host's to judge: not the leaf's.
        let zone = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "db"}}}]}});
        let cycle = one_node_leaf(
            json!({"metadata": {"name": "db", "namespace": "default", "labels": {"app": "db"}},
                "spec": {"nodeName": "east-1", "containers": [{"name": "c", "image": "i"}]}}),
            Default::default(),
        );
        let s = checker.check(
            &cycle,
            &labelled("web", json!({"app": "web"}), zone),
            &virtual_node(),
        );
        assert!(s.is_success(), "{s}");
    }

    #[test]
    fn the_leafs_quota_and_limit_ranges_judge_the_copy() {
        use crate::change::Change;
        let checker = LeafChecker::new(None);
        let idle = json!({"metadata": {"name": "idle", "namespace": "kube-system"},
            "spec": {"nodeName": "east-1", "containers": [{"name": "c", "image": "i"}]}});
        let mut rules = crate::leaf::admission::LeafAdmission::default();
        rules.apply_quota(Change::Apply(
            Arc::new(
                serde_json::from_value(
                    json!({"metadata": {"name": "compute", "namespace": "default"},
                "spec": {"hard": {"pods": "2"}},
                "status": {"hard": {"pods": "2"}, "used": {"pods": "2"}}}),
                )
                .expect("quota"),
            ),
            false,
        ));
        let cycle = one_node_leaf(idle.clone(), rules);
        let s = checker.check(
            &cycle,
            &labelled("web", json!({}), json!({})),
            &virtual_node(),
        );
        assert_eq!(s.code, crate::framework::Code::Unschedulable);
        assert_eq!(
            s.message(),
            "leaf cluster east would refuse the copy: ResourceQuota: exceeded quota: compute, \
             requested: pods=1, used: pods=2, limited: pods=2"
        );

        // A default request the host pod does not have makes the copy too big for the node.
        let mut rules = crate::leaf::admission::LeafAdmission::default();
        rules.apply_limit_range(Change::Apply(
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "lr", "namespace": "default"},
                "spec": {"limits": [{"type": "Container", "defaultRequest": {"memory": "16Gi"}}]}}))
                .expect("lr"),
            ),
            false,
        ));
        let cycle = one_node_leaf(idle.clone(), rules);
        let s = checker.check(
            &cycle,
            &labelled("web", json!({}), json!({})),
            &virtual_node(),
        );
        assert!(s.message().contains("1 Insufficient memory"), "{s}");

        let mut rules = crate::leaf::admission::LeafAdmission::default();
        rules.apply_limit_range(Change::Apply(
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "lr", "namespace": "default"},
                "spec": {"limits": [{"type": "Container", "max": {"cpu": "500m"}}]}}))
                .expect("lr"),
            ),
            false,
        ));
        let cycle = one_node_leaf(idle, rules);
        let s = checker.check(
            &cycle,
            &labelled("web", json!({}), json!({})),
            &virtual_node(),
        );
        assert_eq!(s.code, crate::framework::Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "leaf cluster east would refuse the copy: LimitRange: maximum cpu usage per Container is 500m.  No limit is specified"
        );
    }

    /// ConfigMaps readable, Secrets not, another namespace not asked yet.
    struct Access;
    impl crate::leaf::grants::ReadAccess for Access {
        fn may_read(&self, ns: &str, kind: Copied) -> Option<bool> {
            (ns == "default").then_some(kind == Copied::ConfigMaps)
        }
        fn agent_namespace(&self) -> &str {
            "mcsched-system"
        }
    }

    #[test]
    fn a_pod_whose_objects_the_agent_may_not_read_stays_off_the_leaves() {
        let checker = LeafChecker::new(None);
        let mut cycle = fragmented_leaf();
        cycle.access = crate::leaf::cycle::Access(Arc::new(Access));
        let with = |ns: &str, volume: serde_json::Value| {
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": ns},
                "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": [volume]}
            }))
            .expect("pod");
            PodInfo::new(Arc::new(p))
        };
        let cm = json!({"name": "v", "configMap": {"name": "app"}});
        let s = checker.check(&cycle, &with("default", cm.clone()), &virtual_node());
        assert!(s.is_success(), "{s}");

        let secret = json!({"name": "v", "secret": {"secretName": "db"}});
        let s = checker.check(&cycle, &with("default", secret), &virtual_node());
        assert_eq!(s.code, crate::framework::Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "the agent may not read Secrets in namespace default, which pod sync copies into \
             the leaf (db): kubectl create rolebinding mcsched-secrets -n default \
             --clusterrole=mcsched-agent-secret-reader --serviceaccount=mcsched-system:mcsched-agent"
        );

        let s = checker.check(&cycle, &with("shop", cm), &virtual_node());
        assert_eq!(s.code, crate::framework::Code::Unschedulable);
        assert_eq!(
            s.message(),
            "checking whether the agent may read ConfigMaps in namespace shop"
        );
    }
}

#[cfg(test)]
mod leaf_question_tests {
    use super::*;
    use crate::leaf::leaf_checks::LeafChecks;
    use crate::snapshot::Snapshot;

    /// Leaf `east` of host `h1`, with nodes of no interest, whose answers are asked for.
    fn east_asking() -> (Arc<LeafChecks>, Arc<LeafView>, LeafCycle) {
        let checks = LeafChecks::new("east", "h1");
        let view = Arc::new(LeafView {
            admission: Default::default(),
            cluster: "east".into(),
            snapshot: Snapshot::from_nodes(vec![]),
            checks: checks.clone(),
            host_id: "h1".into(),
            served: Default::default(),
            kept: Default::default(),
            devices: Default::default(),
        });
        let cycle = LeafCycle::new(Arc::new(BTreeMap::from([("east".into(), view.clone())])));
        (checks, view, cycle)
    }

    #[test]
    fn a_pod_waits_for_the_leafs_answers_then_a_clash_keeps_it_off() {
        let (checks, view, cycle) = east_asking();
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "i",
                "envFrom": [{"configMapRef": {"name": "settings"}}]}]}
        }))
        .unwrap();
        let pod = PodInfo::new(Arc::new(pod));
        let waiting = unanswered(&cycle, &pod, Asker::Live).unwrap_or_default();
        assert!(waiting.contains("asking leaf cluster east"), "{waiting}");
        checks.learned(Question::Granted("shop".into()), true);
        assert!(
            unanswered(&cycle, &pod, Asker::Live).is_some(),
            "the ConfigMap is still unknown"
        );
        checks.learned(
            Question::Foreign(Synced::ConfigMap, "shop".into(), "settings".into()),
            true,
        );
        assert_eq!(unanswered(&cycle, &pod, Asker::Live), None);
        let refused = leaf_refuses(&view, &pod).expect("a clash");
        assert!(
            refused
                .message()
                .contains("has a ConfigMap shop/settings that this host's mcsched did not create"),
            "{}",
            refused.message()
        );
        checks.learned(Question::Granted("shop".into()), false);
        let refused = leaf_refuses(&view, &pod).expect("not granted");
        assert!(
            refused
                .message()
                .contains("--namespaces <granted namespaces>,shop")
        );
    }

    /// A ResourceClaimTemplate or a named ResourceClaim of the pod's that the leaf holds
    /// without this host's marks keeps the pod off, as a ConfigMap does.
    #[test]
    fn a_foreign_claim_template_or_resource_claim_keeps_the_pod_off() {
        for (kind, name, message) in [
            (
                Synced::ResourceClaimTemplate,
                "one-gpu",
                "has a ResourceClaimTemplate shop/one-gpu that this host's mcsched did not create",
            ),
            (
                Synced::ResourceClaim,
                "shared-nic",
                "has a ResourceClaim shop/shared-nic that this host's mcsched did not create",
            ),
        ] {
            let (checks, view, cycle) = east_asking();
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {"containers": [{"name": "c", "image": "i"}],
                    "resourceClaims": [
                        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                        {"name": "nic", "resourceClaimName": "shared-nic"}]}
            }))
            .unwrap();
            let pod = PodInfo::new(Arc::new(pod));
            checks.learned(Question::Granted("shop".into()), true);
            let template = Question::Foreign(
                Synced::ResourceClaimTemplate,
                "shop".into(),
                "one-gpu".into(),
            );
            let claim =
                Question::Foreign(Synced::ResourceClaim, "shop".into(), "shared-nic".into());
            assert!(
                unanswered(&cycle, &pod, Asker::Live).is_some(),
                "the template and the claim are asked about"
            );
            checks.learned(template.clone(), false);
            assert!(unanswered(&cycle, &pod, Asker::Live).is_some());
            checks.learned(claim.clone(), false);
            assert_eq!(unanswered(&cycle, &pod, Asker::Live), None);
            assert!(leaf_refuses(&view, &pod).is_none(), "neither clashes");
            checks.learned(Question::Foreign(kind, "shop".into(), name.into()), true);
            let refused = leaf_refuses(&view, &pod).expect("a clash");
            assert!(refused.message().contains(message), "{}", refused.message());
        }
    }

    #[test]
    fn a_leafs_system_namespace_is_never_granted_even_if_its_rbac_says_so() {
        let (checks, view, cycle) = east_asking();
        for ns in [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "mcsched-system",
        ] {
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(
                serde_json::json!({"metadata": {"name": "web", "namespace": ns},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}),
            )
            .unwrap();
            let pod = PodInfo::new(Arc::new(pod));
            // An `--all-namespaces` ClusterRoleBinding: the review would say yes.
            checks.learned(Question::Granted(ns.into()), true);
            assert_eq!(checks.answer(&Question::Granted(ns.into())), Some(false));
            assert_eq!(
                unanswered(&cycle, &pod, Asker::Live),
                None,
                "nothing to ask"
            );
            let refused = leaf_refuses(&view, &pod).expect("never sent");
            assert!(
                refused.message().contains("is a system namespace"),
                "{}",
                refused.message()
            );
        }
    }

    #[test]
    fn a_pods_service_account_is_the_leafs_or_created_where_the_join_allows() {
        let (checks, view, cycle) = east_asking();
        let pod = |sa: Option<&str>| {
            let mut spec = serde_json::json!({"containers": [{"name": "c", "image": "i"}]});
            if let Some(sa) = sa {
                spec["serviceAccountName"] = sa.into();
            }
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(
                serde_json::json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": spec}),
            )
            .unwrap();
            PodInfo::new(Arc::new(pod))
        };
        checks.learned(Question::Granted("shop".into()), true);
        // Every namespace has `default`: nothing asked, nothing noted.
        for plain in [pod(None), pod(Some("default"))] {
            assert_eq!(unanswered(&cycle, &plain, Asker::Live), None);
            assert!(leaf_refuses(&view, &plain).is_none());
            assert_eq!(service_account_note(&view, &plain), None);
        }
        let builder = pod(Some("builder"));
        assert!(
            unanswered(&cycle, &builder, Asker::Live).is_some(),
            "waits for the leaf's answers about the account"
        );
        let has = Question::ServiceAccount("shop".into(), "builder".into());
        let may = Question::MayCreateServiceAccounts("shop".into());
        checks.learned(has.clone(), false);
        checks.learned(may.clone(), false);
        assert_eq!(unanswered(&cycle, &builder, Asker::Live), None);
        let refused = leaf_refuses(&view, &builder).expect("no account, no grant");
        assert_eq!(
            refused.code,
            crate::framework::Code::UnschedulableAndUnresolvable
        );
        assert!(
            refused.message().contains(
                "has no ServiceAccount shop/builder and mcsched may not create one there"
            ) && refused
                .message()
                .contains("kubectl mcsched join cluster east --service-accounts"),
            "{}",
            refused.message()
        );
        checks.learned(may, true);
        assert!(leaf_refuses(&view, &builder).is_none());
        assert_eq!(
            service_account_note(&view, &builder).as_deref(),
            Some("ServiceAccount shop/builder: the leaf has none; pod sync creates it (no RBAC)")
        );
        checks.learned(has, true);
        assert_eq!(
            service_account_note(&view, &builder).as_deref(),
            Some("ServiceAccount shop/builder: the leaf has it")
        );
    }
}
