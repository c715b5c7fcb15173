//! Cases of the plugin-by-plugin comparison: one case is a few nodes, namespaces and pods
//! of its own, and one incoming pod, all generated from (seed, case id) alone so that any
//! case can be generated again without the others.
//!
//! Dimensions: taints of every effect, cordoned nodes, cpu/memory/pods and an extended
//! resource, node images (ImageLocality), several containers, init containers and sidecars
//! (init containers with restartPolicy Always), pod overhead (a RuntimeClass), host ports,
//! priorities (with preemptionPolicy Never), node selectors, required and preferred node
//! affinity (a `matchFields` pin too, which PreFilter turns into a node subset), required
//! and preferred pod affinity and anti-affinity (namespaces, namespaceSelector, the empty
//! selector, matchLabelKeys and mismatchLabelKeys; existing pods' terms for the symmetric
//! checks), topology spread (maxSkew, minDomains, both node inclusion policies,
//! matchLabelKeys, topology keys missing on some nodes), and pods nominated to the case's
//! nodes by an earlier preemption (of the scheduler name both schedulers serve but
//! neither binds here), which Filter counts for pods of their priority or lower.
//!
//! About one case in ten is a volume case (`generate_volumes`): CSINodes with attach limits,
//! claims bound to CSI volumes (shared handles, ReadWriteOncePod claims in use, zones and
//! node affinity), a provisioned claim, in-tree disks inline, missing and ephemeral claims.
//!
//! About one case in fourteen is a crowd: five to eight nodes and 20 to 40 existing pods, many
//! with pod (anti-)affinity terms, and an incoming pod with spread constraints and pod
//! (anti-)affinity, where counts per topology domain decide.
//!
//! One case in eight is a preemption case instead: several full nodes of lower-priority
//! pods (with start times, so that kube's order of victims is defined), a
//! PodDisruptionBudget over some of them, nominated pods, and an incoming pod of high
//! priority, so that preemption picks among many candidate nodes.
//!
//! Everything a case creates is named after it, and its incoming pod is pinned to its own
//! nodes by a required node-affinity term; where kube-scheduler's semantics would reach
//! other cases' nodes (nodeAffinityPolicy Ignore), the topology key is the case's own.
//! The empty namespaceSelector and ImageLocality's spread (images counted over all nodes)
//! do see the other cases of the batch: a batch is generated from the seed too, so a case
//! is re-run with its batch.

use serde_json::{Value, json};

use super::{Rng, ZONES};

/// The objects every case may refer to, created once per cluster.
pub const PRIORITY_CLASSES: &[(&str, i64, &str)] = &[
    ("diff-low", 100, "PreemptLowerPriority"),
    ("diff-high", 1000, "PreemptLowerPriority"),
    ("diff-high-never", 1000, "Never"),
];
pub const RUNTIME_CLASS: &str = "diff-overhead";
/// The scheduler name of the incoming pods in the API: neither scheduler's.
pub const NOBODY: &str = "diff-nobody";
/// The scheduler name of nominated pods: a profile of both schedulers, whose queues hold
/// them without scheduling them (the oracle never schedules, mcsched stands by).
pub const NOMINATED_SCHEDULER: &str = "mcsched";
pub const INCOMING: &str = "incoming";
pub const CASE_LABEL: &str = "diff-case";
pub const BATCH_LABEL: &str = "diff-batch";

const TAINT_KEYS: &[&str] = &["dedicated", "gpu", "spot"];
const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
const GPU: &str = "example.com/gpu";
/// Images on nodes of every case: ImageLocality scales an image's size by the share of all
/// nodes that have it, so an image of one case's nodes only would never count.
const SHARED_IMAGES: &str = "diff.local/shared";
const MB: i64 = 1024 * 1024;
/// ImageLocality's thresholds are 23 MB and 1000 MB per container.
const IMAGE_SIZES: &[(&str, i64)] = &[
    ("tiny", 10 * MB),
    ("small", 200 * MB),
    ("medium", 600 * MB),
    ("large", 1500 * MB),
];

pub struct Case {
    pub seed: u64,
    pub id: usize,
    pub tag: String,
    pub namespaces: Vec<Value>,
    pub nodes: Vec<Value>,
    /// Bound pods, each with its namespace.
    pub existing: Vec<Value>,
    /// The incoming pod with its namespace (schedulerName: neither scheduler).
    pub pod: Value,
    /// Services selecting the incoming pod: PodTopologySpread's system default
    /// constraints then spread it from the pods they select.
    pub services: Vec<Value>,
    /// Unbound pods with `status.nominatedNodeName` (set after they are created).
    pub nominated: Vec<Value>,
    /// PodDisruptionBudgets with their status (set after they are created).
    pub pdbs: Vec<Value>,
    /// Claims of the case's namespace, bound ones with their volume named and marked
    /// bound (there is no PV binder in this cluster).
    pub claims: Vec<Value>,
    /// PersistentVolumes and CSINodes (cluster-scoped, labelled with the batch).
    pub volumes: Vec<Value>,
    pub csi_nodes: Vec<Value>,
    /// PodGroups (scheduling.k8s.io/v1beta1) of the case's namespace.
    pub pod_groups: Vec<Value>,
    /// Unbound members of the incoming pod's PodGroup, of the nominated pods' scheduler
    /// (both sides count them, neither schedules them).
    pub members: Vec<Value>,
    /// How many members (bound and unbound; not the incoming pod, which is neither
    /// scheduler's) each side must count in the group, `namespace/name`.
    pub group_members: Option<(String, usize)>,
}

impl Case {
    pub fn namespace(&self) -> &str {
        &self.tag
    }

    pub fn node_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
            .collect()
    }

    pub fn namespace_names(&self) -> Vec<String> {
        self.namespaces
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
            .collect()
    }

    pub fn existing_keys(&self) -> Vec<String> {
        self.existing
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or_default(),
                    p["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    pub fn service_keys(&self) -> Vec<String> {
        self.services
            .iter()
            .map(|s| {
                format!(
                    "{}/{}",
                    s["metadata"]["namespace"].as_str().unwrap_or_default(),
                    s["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// The nominations both schedulers must hold: `namespace/name=node`.
    pub fn nominated_keys(&self) -> Vec<String> {
        self.nominated
            .iter()
            .map(|p| {
                format!(
                    "{}/{}={}",
                    p["metadata"]["namespace"].as_str().unwrap_or_default(),
                    p["metadata"]["name"].as_str().unwrap_or_default(),
                    p["status"]["nominatedNodeName"]
                        .as_str()
                        .unwrap_or_default()
                )
            })
            .collect()
    }

    pub fn pod_group_keys(&self) -> Vec<String> {
        self.pod_groups
            .iter()
            .map(|g| {
                format!(
                    "{}/{}",
                    g["metadata"]["namespace"].as_str().unwrap_or_default(),
                    g["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    pub fn to_json(&self) -> Value {
        json!({"namespaces": self.namespaces, "nodes": self.nodes, "services": self.services,
               "existing": self.existing, "pod": self.pod, "nominated": self.nominated,
               "pdbs": self.pdbs, "claims": self.claims, "volumes": self.volumes,
               "csiNodes": self.csi_nodes, "podGroups": self.pod_groups,
               "members": self.members})
    }
}

/// Cases whose incoming pod is a PodGroup's member, in per cent.
const POD_GROUP_CASES_PERCENT: u64 = 30;
/// The incoming pod's PodGroup.
pub const POD_GROUP: &str = "group";

/// Makes the incoming pod a member of a PodGroup (`spec.schedulingGroup`), decided by a
/// generator of its own, so that every case stays the case it was before: the group
/// missing, basic, or a gang of `minCount` 1 to 5 with fewer members than that, as many,
/// or more; with or without `schedulingConstraints.topology` (zones); its other members
/// unbound pods of the nominated pods' scheduler and, now and then, the case's bound
/// pods of its namespace (scheduled members, which GangScheduling's Permit counts).
fn with_pod_group(mut case: Case) -> Case {
    let mut rng = Rng(case.seed ^ (case.id as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F));
    rng.next();
    if !rng.chance(POD_GROUP_CASES_PERCENT) {
        return case;
    }
    let tag = case.tag.clone();
    let member_of = json!({"podGroupName": POD_GROUP});
    case.pod["spec"]["schedulingGroup"] = member_of.clone();
    // The group: missing (1 in 8), basic (1 in 4), else a gang.
    let kind = rng.below(8);
    let min_count = match kind {
        0 => None,
        1 | 2 => Some(None),
        _ => Some(Some(1 + rng.below(5))),
    };
    if let Some(min_count) = min_count {
        let policy = match min_count {
            Some(m) => json!({"gang": {"minCount": m}}),
            None => json!({"basic": {}}),
        };
        let mut spec = json!({"schedulingPolicy": policy});
        if rng.chance(40) {
            spec["schedulingConstraints"] =
                json!({"topology": [{"key": "topology.kubernetes.io/zone"}]});
        }
        case.pod_groups.push(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": POD_GROUP, "namespace": tag}, "spec": spec,
        }));
    }
    // Bound members: some of the case's bound pods of its namespace; for a gang mostly
    // one fewer than minCount, as many, or one more, where Permit's count decides.
    let mut counted = 0;
    if rng.chance(75) {
        let mut wanted = match min_count {
            Some(Some(m)) => (m + rng.below(3)).saturating_sub(1) as usize,
            _ => 1 + rng.below(3) as usize,
        };
        for p in case.existing.iter_mut() {
            if wanted > 0 && p["metadata"]["namespace"] == json!(tag) {
                p["spec"]["schedulingGroup"] = member_of.clone();
                counted += 1;
                wanted -= 1;
            }
        }
        // The rest: members of no requests bound to the case's first node.
        let node = case.nodes.first().map(|n| n["metadata"]["name"].clone());
        for i in 0..node.as_ref().map_or(0, |_| wanted) {
            case.existing.push(json!({
                "metadata": {"name": format!("bound-member-{i}"), "namespace": tag},
                "spec": {"nodeName": node, "schedulerName": NOMINATED_SCHEDULER,
                         "schedulingGroup": member_of,
                         "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            }));
            counted += 1;
        }
    }
    // Unbound members: around minCount, one fewer to one more (the incoming pod is not
    // counted: its scheduler is neither's).
    let target = match min_count {
        Some(Some(m)) => (m + rng.below(3)).saturating_sub(1) as usize,
        _ => rng.below(3) as usize,
    };
    for i in counted..target.max(counted) {
        case.members.push(json!({
            "metadata": {"name": format!("member-{i}"), "namespace": tag},
            "spec": {"schedulerName": NOMINATED_SCHEDULER, "schedulingGroup": member_of,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }));
    }
    if case.members.is_empty() && counted == 0 {
        // kube counts a group's members from the first one its queue or cache holds:
        // without any, its state is not found (an error, where the incoming pod, were it
        // kube's, would be the first). One member at least.
        case.members.push(json!({
            "metadata": {"name": "member-0", "namespace": tag},
            "spec": {"schedulerName": NOMINATED_SCHEDULER, "schedulingGroup": member_of,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }));
    }
    case.group_members = Some((format!("{tag}/{POD_GROUP}"), counted + case.members.len()));
    case
}

/// The tag of a case: in every name and label it creates.
pub fn tag(seed: u64, id: usize) -> String {
    format!("s{seed:x}-{id}")
}

fn quantity_cpu(rng: &mut Rng, max_milli: u64) -> String {
    format!("{}m", 100 * (1 + rng.below(max_milli / 100)))
}

fn image(rng: &mut Rng) -> String {
    let (name, _) = rng.pick(IMAGE_SIZES);
    format!("{SHARED_IMAGES}/{name}:1")
}

/// A start time `seconds` into a day (RFC 3339, UTC).
fn start_time(seconds: u64) -> String {
    format!(
        "2026-01-01T{:02}:{:02}:{:02}Z",
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// In `percent` of cases, one or two pods nominated to the case's nodes.
fn nominations(
    rng: &mut Rng,
    percent: u64,
    tag: &str,
    node_names: &[String],
    classes: &[&str],
) -> Vec<Value> {
    let mut out = Vec::new();
    if rng.chance(percent) {
        for i in 0..1 + rng.below(2) as usize {
            let node = rng.pick(node_names).clone();
            out.push(nominated_pod(rng, tag, i, &node, classes));
        }
    }
    out
}

/// A pod nominated to `node`, of a random priority and size.
fn nominated_pod(rng: &mut Rng, tag: &str, i: usize, node: &str, classes: &[&str]) -> Value {
    let mut spec = json!({"schedulerName": NOMINATED_SCHEDULER,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {
            "cpu": quantity_cpu(rng, 2500), "memory": format!("{}Mi", 256 * (1 + rng.below(4)))}}}]});
    let class = *rng.pick(classes);
    if !class.is_empty() {
        spec["priorityClassName"] = json!(class);
    }
    if rng.chance(15) {
        spec["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
    }
    json!({
        "metadata": {"name": format!("nom{i}"), "namespace": tag,
                     "labels": {"app": rng.pick(&["web", "db", INCOMING]), "version": rng.pick(&["v1", "v2"])}},
        "spec": spec,
        "status": {"nominatedNodeName": node},
    })
}

pub fn generate(seed: u64, id: usize, batch: &str) -> Case {
    with_pod_group(generate_base(seed, id, batch))
}

fn generate_base(seed: u64, id: usize, batch: &str) -> Case {
    let mut rng = Rng(seed ^ (id as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    rng.next();
    let tag = tag(seed, id);
    if rng.chance(12) {
        return generate_preemption(seed, id, batch, tag, rng);
    }
    // Decided by a generator of its own, so that every other case of a seed stays the
    // case it was before volume cases were added.
    if Rng(seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)).chance(VOLUME_CASES_PERCENT)
    {
        return generate_volumes(seed, id, batch, tag, rng);
    }
    // A crowd: many pods with affinity terms on more nodes, and an incoming pod with
    // spread constraints and pod (anti-)affinity over them — where counts per topology
    // domain, not a handful of pods, decide.
    let crowd = rng.chance(8);
    let rack = format!("diff.mcsched.io/rack-{tag}");
    let second_ns = format!("{tag}-b");
    let namespaces = vec![
        json!({"metadata": {"name": tag, "labels": {CASE_LABEL: tag, "team": rng.pick(&["x", "y"])}}}),
        json!({"metadata": {"name": second_ns, "labels": {CASE_LABEL: tag, "team": rng.pick(&["x", "y"])}}}),
    ];

    let n_nodes = if crowd {
        5 + rng.below(4)
    } else {
        2 + rng.below(4)
    } as usize;
    let mut nodes = Vec::new();
    for i in 0..n_nodes {
        let name = format!("{tag}-n{i}");
        let mut labels = json!({
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": rng.pick(ZONES),
            CASE_LABEL: tag,
            BATCH_LABEL: batch,
        });
        if rng.chance(40) {
            labels["disk"] = json!(rng.pick(&["ssd", "hdd"]));
        }
        if rng.chance(75) {
            labels[rack.as_str()] = json!(rng.pick(&["r1", "r2"]));
        }
        let mut taints: Vec<Value> = Vec::new();
        for _ in 0..usize::from(rng.chance(25)) + usize::from(rng.chance(8)) {
            let t =
                json!({"key": rng.pick(TAINT_KEYS), "value": "true", "effect": rng.pick(EFFECTS)});
            // Taints are unique by key and effect.
            if !taints
                .iter()
                .any(|o| o["key"] == t["key"] && o["effect"] == t["effect"])
            {
                taints.push(t);
            }
        }
        let mut allocatable = json!({
            "cpu": (1 + rng.below(6)).to_string(),
            "memory": format!("{}Gi", 2 * (1 + rng.below(6))),
            "pods": (3 + rng.below(8)).to_string(),
        });
        if crowd {
            allocatable = json!({"cpu": "32", "memory": "128Gi", "pods": "110"});
        }
        if rng.chance(40) {
            allocatable[GPU] = json!((1 + rng.below(2)).to_string());
        }
        let mut status = json!({
            "capacity": allocatable, "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        });
        if rng.chance(70) {
            let mut images = Vec::new();
            for (img, size) in IMAGE_SIZES {
                if rng.chance(50) {
                    images.push(
                        json!({"names": [format!("{SHARED_IMAGES}/{img}:1")], "sizeBytes": size}),
                    );
                }
            }
            status["images"] = json!(images);
        }
        nodes.push(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints, "unschedulable": rng.chance(5)},
            "status": status,
        }));
    }
    let node_names: Vec<String> = nodes
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();
    let topology_keys = [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        rack.as_str(),
    ];

    let mut existing = Vec::new();
    let mut host_ports = std::collections::HashSet::new();
    let n_existing = if crowd {
        20 + rng.below(21)
    } else {
        rng.below(6)
    };
    for j in 0..n_existing {
        let ns = if rng.chance(75) {
            tag.as_str()
        } else {
            second_ns.as_str()
        };
        let mut containers = Vec::new();
        for k in 0..1 + rng.below(2) {
            let mut c = json!({"name": format!("c{k}"), "image": "pause",
                "resources": {"requests": {"cpu": quantity_cpu(&mut rng, 1200), "memory": format!("{}Mi", 128 * (1 + rng.below(8)))}}});
            if rng.chance(15) {
                c["ports"] = json!([{"containerPort": 80 + k as i64, "hostPort": 8080 + rng.below(2) as i64 + 10 * k as i64}]);
            }
            if rng.chance(10) {
                c["resources"]["requests"][GPU] = json!("1");
                c["resources"]["limits"] = json!({GPU: "1"});
            }
            containers.push(c);
        }
        let node = rng.pick(&node_names).clone();
        // The kubelet refuses a pod whose host port another pod on its node holds, so no
        // scheduler sees two such pods on a node (kube's port bookkeeping is a set and
        // assumes it).
        for c in &mut containers {
            if let Some(port) = c["ports"][0]["hostPort"].as_i64()
                && !host_ports.insert((node.clone(), port))
                && let Some(c) = c.as_object_mut()
            {
                c.remove("ports");
            }
        }
        let mut spec = json!({
            "nodeName": node,
            "containers": containers,
            "tolerations": [{"operator": "Exists"}],
        });
        if rng.chance(15) {
            spec["initContainers"] = json!([{"name": "sidecar", "image": "pause", "restartPolicy": "Always",
                "resources": {"requests": {"cpu": quantity_cpu(&mut rng, 500)}}}]);
        }
        if rng.chance(40) {
            spec["priorityClassName"] = json!(rng.pick(&["diff-low", "diff-high"]));
        }
        let towards_incoming = |rng: &mut Rng| {
            // In a crowd, terms towards other apps too: grouped with the rest, matched
            // against the incoming pod and found not to apply.
            let app = if crowd {
                *rng.pick(&[INCOMING, "web", "db"])
            } else {
                INCOMING
            };
            let mut t = json!({"labelSelector": {"matchLabels": {"app": app}},
                               "topologyKey": rng.pick(&topology_keys)});
            if ns != tag {
                t["namespaces"] = json!([tag]);
            }
            t
        };
        if rng.chance(8) {
            // The symmetric check: an existing pod that keeps the incoming one away.
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [towards_incoming(&mut rng)]}});
        } else if crowd && rng.chance(15) {
            // Existing pods' required affinity counts in the score (hardPodAffinityWeight).
            spec["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [towards_incoming(&mut rng)]}});
        } else if rng.chance(if crowd { 40 } else { 20 }) {
            // Existing pods' preferred terms count in the incoming pod's score.
            let kind = *rng.pick(&["podAffinity", "podAntiAffinity"]);
            spec["affinity"] = json!({kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1 + rng.below(100), "podAffinityTerm": towards_incoming(&mut rng)}]}});
        }
        existing.push(json!({
            "metadata": {"name": format!("e{j}"), "namespace": ns,
                         "labels": {"app": rng.pick(&["web", "db", "web", "db", INCOMING]), "version": rng.pick(&["v1", "v2"])}},
            "spec": spec,
            // Distinct start times: kube orders preemption victims of one priority by them.
            "status": {"startTime": start_time(j * 60 + rng.below(60))},
        }));
    }

    // The incoming pod.
    let mut containers = Vec::new();
    for k in 0..1 + rng.below(2) + u64::from(rng.chance(15)) {
        let img = if rng.chance(60) {
            image(&mut rng)
        } else {
            "pause".to_string()
        };
        let mut c = json!({"name": format!("c{k}"), "image": img,
            "resources": {"requests": {"cpu": quantity_cpu(&mut rng, 1500), "memory": format!("{}Mi", 256 * (1 + rng.below(6)))}}});
        if rng.chance(20) {
            c["ports"] = json!([{"containerPort": 80 + k as i64, "hostPort": 8080 + rng.below(2) as i64 + 10 * k as i64}]);
        }
        if rng.chance(15) {
            c["resources"]["requests"][GPU] = json!("1");
            c["resources"]["limits"] = json!({GPU: "1"});
        }
        containers.push(c);
    }
    let mut spec = json!({"schedulerName": NOBODY, "containers": containers});
    let mut init = Vec::new();
    if rng.chance(20) {
        init.push(json!({"name": "init", "image": "pause",
            "resources": {"requests": {"cpu": quantity_cpu(&mut rng, 3000)}}}));
    }
    if rng.chance(20) {
        init.push(
            json!({"name": "sidecar", "image": image(&mut rng), "restartPolicy": "Always",
            "resources": {"requests": {"cpu": quantity_cpu(&mut rng, 800), "memory": "128Mi"}}}),
        );
    }
    if !init.is_empty() {
        spec["initContainers"] = json!(init);
    }
    if rng.chance(20) {
        spec["runtimeClassName"] = json!(RUNTIME_CLASS);
    }
    if rng.chance(30) {
        spec["priorityClassName"] =
            json!(rng.pick(&["diff-low", "diff-high", "diff-high", "diff-high-never"]));
    }
    if rng.chance(45) {
        let key = *rng.pick(TAINT_KEYS);
        spec["tolerations"] = if rng.chance(50) {
            json!([{"key": key, "operator": "Exists"}])
        } else {
            json!([{"key": key, "operator": "Equal", "value": "true", "effect": rng.pick(EFFECTS)}])
        };
    }
    if rng.chance(15) {
        spec["nodeSelector"] = json!({"disk": rng.pick(&["ssd", "hdd"])});
    }
    let mut term =
        json!({"matchExpressions": [{"key": CASE_LABEL, "operator": "In", "values": [tag]}]});
    if rng.chance(25)
        && let Some(m) = term["matchExpressions"].as_array_mut()
    {
        m.push(json!({"key": "topology.kubernetes.io/zone",
                      "operator": if rng.chance(70) { "In" } else { "NotIn" }, "values": [rng.pick(ZONES)]}));
    }
    let mut terms = vec![term];
    if rng.chance(10) {
        // NodeAffinity's PreFilter turns metadata.name pins into a node subset; a field
        // selector takes one name, so one term per node.
        let mut some: Vec<&String> = node_names.iter().filter(|_| rng.chance(60)).collect();
        if some.is_empty() {
            some.extend(node_names.first());
        }
        let base = terms.remove(0);
        // A name no node has: PreFilter's node set may name nodes that do not exist.
        let ghost = format!("{tag}-ghost");
        if rng.chance(25) {
            some.push(&ghost);
        }
        for name in some {
            let mut t = base.clone();
            t["matchFields"] =
                json!([{"key": "metadata.name", "operator": "In", "values": [name]}]);
            terms.push(t);
        }
    }
    let mut node_affinity =
        json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}});
    if rng.chance(30) {
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = json!([{
            "weight": 1 + rng.below(100),
            "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
        }]);
    }
    spec["affinity"] = json!({"nodeAffinity": node_affinity});
    let pod_term = |rng: &mut Rng| {
        let mut t = json!({"labelSelector": {"matchLabels": {"app": rng.pick(&["web", "db", INCOMING])}},
                           "topologyKey": rng.pick(&topology_keys)});
        match rng.below(10) {
            0 | 1 => t["namespaces"] = json!([second_ns]),
            2 => t["namespaces"] = json!([tag, second_ns]),
            3 | 4 => {
                t["namespaceSelector"] =
                    json!({"matchLabels": {CASE_LABEL: tag, "team": rng.pick(&["x", "y"])}})
            }
            5 => t["namespaceSelector"] = json!({}),
            _ => {}
        }
        if rng.chance(15) {
            t[if rng.chance(50) {
                "matchLabelKeys"
            } else {
                "mismatchLabelKeys"
            }] = json!(["version"]);
        }
        t
    };
    if rng.chance(if crowd { 40 } else { 18 }) {
        spec["affinity"]["podAntiAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [pod_term(&mut rng)]});
    } else if rng.chance(if crowd { 35 } else { 15 }) {
        spec["affinity"]["podAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [pod_term(&mut rng)]});
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        if rng.chance(if crowd { 60 } else { 35 }) {
            let terms: Vec<Value> = (0..1 + rng.below(2))
                .map(|_| json!({"weight": 1 + rng.below(100), "podAffinityTerm": pod_term(&mut rng)}))
                .collect();
            spec["affinity"][kind]["preferredDuringSchedulingIgnoredDuringExecution"] =
                json!(terms);
        }
    }
    if crowd || rng.chance(35) {
        let mut constraints = Vec::new();
        for _ in 0..1 + usize::from(rng.chance(if crowd { 60 } else { 25 })) {
            let ignore = rng.chance(25);
            // Ignore counts nodes outside the pod's node affinity: the case's own key keeps
            // other cases' nodes out.
            let key = if ignore {
                rack.as_str()
            } else {
                *rng.pick(&topology_keys)
            };
            let mut c = json!({
                "maxSkew": 1 + rng.below(2),
                "topologyKey": key,
                "whenUnsatisfiable": if rng.chance(50) { "DoNotSchedule" } else { "ScheduleAnyway" },
                "labelSelector": {"matchLabels": {"app": rng.pick(&["web", "db", INCOMING])}},
            });
            if ignore {
                c["nodeAffinityPolicy"] = json!("Ignore");
            } else if rng.chance(20) {
                c["nodeAffinityPolicy"] = json!("Honor");
            }
            if rng.chance(25) {
                c["nodeTaintsPolicy"] = json!(rng.pick(&["Honor", "Ignore"]));
            }
            if rng.chance(15) {
                c["minDomains"] = json!(2 + rng.below(3));
                c["whenUnsatisfiable"] = json!("DoNotSchedule");
            }
            if rng.chance(15) {
                c["matchLabelKeys"] = json!(["version"]);
            }
            constraints.push(c);
        }
        // One constraint per topology key and whenUnsatisfiable.
        constraints.dedup_by(|a, b| {
            a["topologyKey"] == b["topologyKey"] && a["whenUnsatisfiable"] == b["whenUnsatisfiable"]
        });
        spec["topologySpreadConstraints"] = json!(constraints);
    }
    let nominated = nominations(
        &mut rng,
        20,
        &tag,
        &node_names,
        &["", "diff-low", "diff-high"],
    );
    let version = *rng.pick(&["v1", "v2"]);
    let mut services = Vec::new();
    if spec.get("topologySpreadConstraints").is_none() && rng.chance(40) {
        let mut selector = json!({"app": INCOMING});
        if rng.chance(30) {
            selector["version"] = json!(version);
        }
        services.push(json!({"metadata": {"name": "svc", "namespace": tag},
                             "spec": {"selector": selector, "ports": [{"port": 80}]}}));
    }
    Case {
        seed,
        id,
        services,
        nominated,
        pdbs: Vec::new(),
        claims: Vec::new(),
        volumes: Vec::new(),
        csi_nodes: Vec::new(),
        pod_groups: Vec::new(),
        members: Vec::new(),
        group_members: None,
        namespaces,
        nodes,
        existing,
        pod: json!({
            "metadata": {"name": INCOMING, "namespace": tag,
                         "labels": {"app": INCOMING, "version": version}},
            "spec": spec,
        }),
        tag,
    }
}

/// Full nodes of lower-priority pods and a high-priority incoming pod: preemption picks
/// among many candidates, PodDisruptionBudgets and nominated pods weighing in.
fn generate_preemption(seed: u64, id: usize, batch: &str, tag: String, mut rng: Rng) -> Case {
    let namespaces = vec![json!({"metadata": {"name": tag, "labels": {CASE_LABEL: tag}}})];
    let mut nodes = Vec::new();
    let mut existing = Vec::new();
    let mut started = 0;
    for i in 0..4 + rng.below(5) as usize {
        let name = format!("{tag}-n{i}");
        let cpu = 2 + rng.below(3);
        nodes.push(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": rng.pick(ZONES), CASE_LABEL: tag, BATCH_LABEL: batch}},
            "status": {"capacity": {"cpu": cpu.to_string(), "memory": "16Gi", "pods": "10"},
                       "allocatable": {"cpu": cpu.to_string(), "memory": "16Gi", "pods": "10"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }));
        // The node filled up by 1-3 pods.
        let k = 1 + rng.below(3);
        for j in 0..k {
            started += 1 + rng.below(50);
            let mut spec = json!({"nodeName": name, "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": format!("{}m", cpu * 1000 / k), "memory": "1Gi"}}}]});
            let class = *rng.pick(&["", "diff-low", "diff-low", "diff-high"]);
            if !class.is_empty() {
                spec["priorityClassName"] = json!(class);
            }
            existing.push(json!({
                "metadata": {"name": format!("e{i}-{j}"), "namespace": tag,
                             "labels": {"app": rng.pick(&["web", "db"])}},
                "spec": spec,
                // Distinct start times: kube orders victims of one priority by them.
                "status": {"startTime": start_time(started)},
            }));
        }
    }
    let node_names: Vec<String> = nodes
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();
    let mut pdbs = Vec::new();
    if rng.chance(60) {
        pdbs.push(json!({
            "metadata": {"name": "db", "namespace": tag},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": rng.below(2), "currentHealthy": 0,
                       "desiredHealthy": 0, "expectedPods": 0},
        }));
    }
    let nominated = nominations(&mut rng, 40, &tag, &node_names, &["diff-low", "diff-high"]);
    let pod = json!({
        "metadata": {"name": INCOMING, "namespace": tag, "labels": {"app": INCOMING}},
        "spec": {
            "schedulerName": NOBODY,
            "priorityClassName": "diff-high",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {
                "cpu": quantity_cpu(&mut rng, 3000), "memory": "1Gi"}}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": CASE_LABEL, "operator": "In", "values": [tag]}]}]}}},
        },
    });
    Case {
        seed,
        id,
        namespaces,
        nodes,
        existing,
        pod,
        services: Vec::new(),
        nominated,
        pdbs,
        claims: Vec::new(),
        volumes: Vec::new(),
        csi_nodes: Vec::new(),
        pod_groups: Vec::new(),
        members: Vec::new(),
        group_members: None,
        tag,
    }
}

/// Share of the cases that are volume cases.
const VOLUME_CASES_PERCENT: u64 = 12;
/// CSI drivers of the volume cases, and the drivers the in-tree GCE PD and AWS EBS volumes
/// migrate to (counted under them by NodeVolumeLimits).
const CSI_DRIVERS: &[&str] = &["csi-a.diff.mcsched.io", "csi-b.diff.mcsched.io"];
const MIGRATED_DRIVERS: &[&str] = &["pd.csi.storage.gke.io", "ebs.csi.aws.com"];
/// A WaitForFirstConsumer class provisioned by the first CSI driver: its unbound claims
/// count under that driver.
pub const PROVISIONED_CLASS: &str = "diff-csi-wffc";
pub const PROVISIONED_CLASS_DRIVER: &str = CSI_DRIVERS[0];

/// Volumes against the nodes' attach limits and each other: CSINodes with per-driver
/// limits (or none, or no CSINode), claims bound to CSI volumes (some sharing a handle,
/// some ReadWriteOncePod and in use, some with a zone or a node affinity), a provisioned
/// unbound claim, in-tree GCE PD and AWS EBS disks inline (read-only or not), and now and
/// then a claim that does not exist or a generic ephemeral volume whose claim does not;
/// existing pods using them on the case's nodes. NodeVolumeLimits, VolumeRestrictions,
/// VolumeBinding and VolumeZone decide.
fn generate_volumes(seed: u64, id: usize, batch: &str, tag: String, mut rng: Rng) -> Case {
    let namespaces = vec![json!({"metadata": {"name": tag, "labels": {CASE_LABEL: tag}}})];
    let mut nodes = Vec::new();
    let mut csi_nodes = Vec::new();
    for i in 0..2 + rng.below(4) as usize {
        let name = format!("{tag}-n{i}");
        let zone = *rng.pick(ZONES);
        nodes.push(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "r1",
                CASE_LABEL: tag, BATCH_LABEL: batch}},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "20"},
                       "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }));
        if rng.chance(85) {
            let mut drivers = Vec::new();
            for d in CSI_DRIVERS.iter().chain(MIGRATED_DRIVERS) {
                if rng.chance(65) {
                    let mut driver = json!({"name": d, "nodeID": name});
                    if rng.chance(85) {
                        driver["allocatable"] = json!({"count": rng.below(4)});
                    }
                    drivers.push(driver);
                }
            }
            csi_nodes.push(
                json!({"metadata": {"name": name, "labels": {BATCH_LABEL: batch}},
                                  "spec": {"drivers": drivers}}),
            );
        }
    }
    let node_names: Vec<String> = nodes
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();

    // Claims bound to CSI volumes.
    let mut claims = Vec::new();
    let mut volumes = Vec::new();
    let mut bound = Vec::new();
    let mut once_pod = Vec::new();
    for j in 0..1 + rng.below(5) as usize {
        let claim = format!("c{j}");
        let pv = format!("{tag}-pv{j}");
        let mode = if rng.chance(20) {
            "ReadWriteOncePod"
        } else {
            "ReadWriteOnce"
        };
        // Two volumes of one handle are one attachment.
        let handle = if j > 0 && rng.chance(15) { 0 } else { j };
        let mut spec = json!({
            "capacity": {"storage": "1Gi"}, "accessModes": [mode], "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": rng.pick(CSI_DRIVERS), "volumeHandle": format!("{tag}-h{handle}")},
            "claimRef": {"namespace": tag, "name": claim},
        });
        let mut labels = json!({BATCH_LABEL: batch});
        if rng.chance(15) {
            labels["topology.kubernetes.io/zone"] = json!(rng.pick(ZONES));
        } else if rng.chance(15) {
            spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [rng.pick(&node_names)]}]}]}});
        }
        volumes.push(json!({"metadata": {"name": pv, "labels": labels}, "spec": spec}));
        claims.push(json!({
            "metadata": {"name": claim, "namespace": tag,
                         "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": [mode], "storageClassName": "", "volumeName": pv,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }));
        if mode == "ReadWriteOncePod" {
            once_pod.push(claim.clone());
        }
        bound.push(claim);
    }
    let provisioned = rng.chance(30).then(|| {
        claims.push(json!({
            "metadata": {"name": "provisioned", "namespace": tag},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": PROVISIONED_CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }));
        "provisioned".to_string()
    });
    let inline = |rng: &mut Rng| {
        if rng.chance(50) {
            json!({"gcePersistentDisk": {"pdName": format!("{tag}-pd{}", rng.below(2)),
                                         "readOnly": rng.chance(40)}})
        } else {
            json!({"awsElasticBlockStore": {"volumeID": format!("{tag}-ebs{}", rng.below(2))}})
        }
    };

    // Pods on the nodes: each ReadWriteOncePod claim in use by one of them or by none.
    let mut existing = Vec::new();
    let mut in_use: Vec<String> = once_pod
        .iter()
        .filter(|_| rng.chance(60))
        .cloned()
        .collect();
    for j in 0..rng.below(6) as usize {
        let mut vols = Vec::new();
        for k in 0..rng.below(4) as usize {
            let source = if rng.chance(60) {
                let claim = rng.pick(&bound).clone();
                if once_pod.contains(&claim) {
                    continue;
                }
                json!({"persistentVolumeClaim": {"claimName": claim}})
            } else {
                inline(&mut rng)
            };
            let mut v = source;
            v["name"] = json!(format!("v{k}"));
            vols.push(v);
        }
        if let Some(claim) = in_use.pop() {
            vols.push(json!({"name": "once", "persistentVolumeClaim": {"claimName": claim}}));
        }
        existing.push(json!({
            "metadata": {"name": format!("e{j}"), "namespace": tag},
            "spec": {"nodeName": rng.pick(&node_names), "volumes": vols,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "pause",
                                     "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"startTime": start_time(j as u64 * 60)},
        }));
    }
    // Claims in use that no pod above took: a pod of their own.
    for claim in in_use {
        existing.push(json!({
            "metadata": {"name": format!("once-{claim}"), "namespace": tag},
            "spec": {"nodeName": rng.pick(&node_names),
                     "volumes": [{"name": "once", "persistentVolumeClaim": {"claimName": claim}}],
                     "containers": [{"name": "c", "image": "pause"}]},
        }));
    }

    let mut vols = Vec::new();
    for k in 0..1 + rng.below(3) as usize {
        let mut v = match rng.below(20) {
            0 => json!({"persistentVolumeClaim": {"claimName": "missing"}}),
            1 => json!({"ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": PROVISIONED_CLASS,
                "resources": {"requests": {"storage": "1Gi"}}}}}}),
            2..=5 if provisioned.is_some() => {
                json!({"persistentVolumeClaim": {"claimName": provisioned.as_deref()}})
            }
            2..=8 => inline(&mut rng),
            _ => json!({"persistentVolumeClaim": {"claimName": rng.pick(&bound)}}),
        };
        // A pod names a claim once.
        if let Some(claim) = v["persistentVolumeClaim"]["claimName"].as_str()
            && vols
                .iter()
                .any(|o: &Value| o["persistentVolumeClaim"]["claimName"] == claim)
        {
            continue;
        }
        v["name"] = json!(format!("v{k}"));
        vols.push(v);
    }
    let pod = json!({
        "metadata": {"name": INCOMING, "namespace": tag, "labels": {"app": INCOMING}},
        "spec": {
            "schedulerName": NOBODY,
            "volumes": vols,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": CASE_LABEL, "operator": "In", "values": [tag]}]}]}}},
        },
    });
    Case {
        seed,
        id,
        namespaces,
        nodes,
        existing,
        pod,
        services: Vec::new(),
        nominated: Vec::new(),
        pdbs: Vec::new(),
        claims,
        volumes,
        csi_nodes,
        pod_groups: Vec::new(),
        members: Vec::new(),
        group_members: None,
        tag,
    }
}
