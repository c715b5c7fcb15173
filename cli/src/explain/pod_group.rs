//! `kubectl mcsched explain podgroup NAME`: a PodGroup as the agent scheduled it — its
//! policy and topology, its condition (PodGroupInitiallyScheduled, or PodGroupScheduled in
//! v1alpha2), and each member: where it went (down to the leaf node), or why it waits.

use std::collections::BTreeMap;

use anyhow::bail;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::Api;
use kube::api::ListParams;
use mcsched_shared::explain::Outcome;
use mcsched_shared::keys;
use mcsched_shared::pod_group_versions::{self, PodGroupV1alpha2, PodGroupVersion};
use serde::Serialize;

use super::{Format, ViewArgs, api};
use crate::kube_context::KubeArgs;

#[derive(Debug, clap::Args)]
pub struct PodGroupArgs {
    /// The PodGroup (scheduling.k8s.io/v1beta1, or v1alpha2 on v1.36) to explain, in -n/--namespace (else
    /// the kubeconfig context's namespace).
    pub name: String,
    #[command(flatten)]
    pub view: ViewArgs,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupView {
    pod_group: String,
    /// `gang` or `basic`.
    policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_count: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    topology_key: Option<String>,
    /// The domain of `topologyKey` the bound members are in (more than one: a list).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    domains: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled: Option<ConditionView>,
    /// The condition the served version names (shown when not set yet).
    #[serde(skip)]
    condition: &'static str,
    members: Vec<MemberView>,
}

#[derive(Debug, Serialize)]
struct ConditionView {
    /// `PodGroupInitiallyScheduled` (v1beta1) or `PodGroupScheduled` (v1alpha2).
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MemberView {
    pod: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leaf_node: Option<String>,
    phase: String,
    /// Why it is not bound: its PodScheduled condition's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<String>,
}

/// The PodGroup in the newest version the API server serves (v1beta1, else v1alpha2 read
/// as v1beta1), and that version. Which is served is asked by listing (a GET of one name
/// answers 404 NotFound alike for a version not served and for a name not there).
async fn get_group(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<(PodGroup, PodGroupVersion)> {
    let denied = |s: &kube::core::Status| {
        anyhow::anyhow!("you may not get podgroups in namespace {ns}: {}", s.message)
    };
    let one = ListParams::default().limit(1);
    for version in PodGroupVersion::ALL {
        let got = match version {
            PodGroupVersion::V1beta1 => {
                let api = Api::<PodGroup>::namespaced(client.clone(), ns);
                match api.list_metadata(&one).await {
                    Ok(_) => api.get_opt(name).await,
                    Err(e) => Err(e),
                }
            }
            PodGroupVersion::V1alpha2 => {
                let api = Api::<PodGroupV1alpha2>::namespaced(client.clone(), ns);
                match api.list_metadata(&one).await {
                    Ok(_) => api.get_opt(name).await.map(|g| g.map(PodGroup::from)),
                    Err(e) => Err(e),
                }
            }
        };
        match got {
            Ok(Some(g)) => return Ok((g, version)),
            Ok(None) => bail!("podgroup {ns}/{name} not found ({})", version.api_version()),
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(kube::Error::Api(s)) if s.code == 403 => return Err(denied(&s)),
            Err(e) => return Err(e.into()),
        }
    }
    bail!(
        "podgroup {ns}/{name}: {}",
        pod_group_versions::none_served()
    )
}

fn group_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .as_deref()
}

pub async fn run(kube: &KubeArgs, args: PodGroupArgs) -> anyhow::Result<()> {
    let (client, ns) = kube.namespaced_client_without_retries().await?;
    let (group, version) = get_group(&client, &ns, &args.name).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let members: Vec<Pod> = match pods.list(&ListParams::default()).await {
        Ok(l) => l
            .items
            .into_iter()
            .filter(|p| group_of(p) == Some(args.name.as_str()))
            .collect(),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            bail!("you may not list pods in namespace {ns}: {}", s.message)
        }
        Err(e) => return Err(e.into()),
    };
    let spec = &group.spec;
    let topology_key = spec
        .scheduling_constraints
        .as_ref()
        .and_then(|c| c.topology.as_ref())
        .and_then(|t| t.first())
        .map(|t| t.key.clone());
    let mut view = GroupView {
        pod_group: format!("{ns}/{}", args.name),
        policy: if spec.scheduling_policy.gang.is_some() {
            "gang".into()
        } else {
            "basic".into()
        },
        min_count: spec.scheduling_policy.gang.as_ref().map(|g| g.min_count),
        topology_key: topology_key.clone(),
        domains: Vec::new(),
        condition: version.scheduled_condition(),
        scheduled: group
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == version.scheduled_condition()))
            .map(|c| ConditionView {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            }),
        members: Vec::new(),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let mut domains: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &members {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        // Why a member waits is its PodScheduled condition, as the agent wrote it after
        // the group's last cycle (an explanation served now would judge it alone).
        let waiting = match &node {
            Some(_) => None,
            None => pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                .filter(|c| c.status == "False")
                .and_then(|c| c.message.clone()),
        };
        // The leaf node behind a virtual node is in the agent's explanation; one missing
        // (another scheduler, a restart) is no error here.
        let leaf_node = match &node {
            Some(n) if n.starts_with(keys::VIRTUAL_NODE_PREFIX) => {
                match api::get_explanation(&client, &ns, &name).await {
                    Ok(e) => match e.status.outcome {
                        Outcome::Scheduled { leaf_node, .. } => leaf_node,
                        _ => None,
                    },
                    Err(_) => None,
                }
            }
            _ => None,
        };
        // A member held to a leaf's part of a domain says which on itself.
        let leaf_domain = (pod.metadata.annotations.as_ref())
            .and_then(|a| a.get(keys::LEAF_DOMAIN_ANNOTATION))
            .and_then(|raw| serde_json::from_str::<BTreeMap<String, String>>(raw).ok());
        let held = |key: &str| leaf_domain.as_ref().and_then(|d| d.get(key).cloned());
        if let (Some(key), Some(n)) = (&topology_key, &node)
            && let Some(d) = match held(key) {
                Some(d) => Some(d),
                None => domain(&nodes, n, key).await,
            }
        {
            *domains.entry(d).or_default() += 1;
        }
        view.members.push(MemberView {
            pod: name,
            node,
            leaf_node,
            phase: pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "Pending".into()),
            waiting,
        });
    }
    view.domains = domains.into_keys().collect();
    view.members.sort_by(|a, b| a.pod.cmp(&b.pod));
    match args.view.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&view)?),
        Format::Yaml => print!("{}", mcsched_shared::yaml::to_string(&view)?),
        Format::Table | Format::Wide => print!("{}", render(&view)),
    }
    Ok(())
}

/// The node's domain of `key`: its label; for `mcsched.io/cluster` a host node without
/// the label is in `host`, as the agent counts it.
async fn domain(nodes: &Api<Node>, node: &str, key: &str) -> Option<String> {
    let n = nodes.get_opt(node).await.ok().flatten()?;
    let labels = n.metadata.labels.unwrap_or_default();
    match labels.get(key) {
        Some(v) => Some(v.clone()),
        None if key == keys::CLUSTER_LABEL => Some("host".into()),
        None => None,
    }
}

fn render(v: &GroupView) -> String {
    let mut out = format!("PODGROUP {}  POLICY {}", v.pod_group, v.policy);
    if let Some(min) = v.min_count {
        out.push_str(&format!(" (minCount {min})"));
    }
    if let Some(key) = &v.topology_key {
        out.push_str(&format!("  TOPOLOGY {key}"));
    }
    out.push('\n');
    match &v.scheduled {
        Some(c) if c.message.is_empty() => {
            out.push_str(&format!("{}: {} ({})\n", c.type_, c.status, c.reason))
        }
        Some(c) => out.push_str(&format!(
            "{}: {} ({}): {}\n",
            c.type_, c.status, c.reason, c.message
        )),
        None => out.push_str(&format!("{}: not set yet\n", v.condition)),
    }
    let bound = v.members.iter().filter(|m| m.node.is_some()).count();
    let in_leaves = v
        .members
        .iter()
        .filter(|m| {
            m.node
                .as_deref()
                .is_some_and(|n| n.starts_with(keys::VIRTUAL_NODE_PREFIX))
        })
        .count();
    out.push_str(&format!(
        "members: {} ({bound} bound: {} in the host, {in_leaves} in leaves)",
        v.members.len(),
        bound - in_leaves
    ));
    if !v.domains.is_empty() {
        out.push_str(&format!("; domain {}", v.domains.join(", ")));
    }
    out.push_str("\n\n");
    let mut rows = vec![vec![
        "POD".to_string(),
        "NODE".into(),
        "LEAF NODE".into(),
        "PHASE".into(),
        "WAITING".into(),
    ]];
    for m in &v.members {
        rows.push(vec![
            m.pod.clone(),
            m.node.clone().unwrap_or_else(|| "-".into()),
            m.leaf_node.clone().unwrap_or_else(|| "-".into()),
            m.phase.clone(),
            m.waiting.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push_str(&crate::table::render(&rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_reads_as_kubectl_tables_do() {
        let v = GroupView {
            pod_group: "default/train".into(),
            policy: "gang".into(),
            min_count: Some(3),
            topology_key: Some(keys::CLUSTER_LABEL.into()),
            domains: vec!["east".into()],
            condition: "PodGroupScheduled",
            scheduled: Some(ConditionView {
                type_: "PodGroupScheduled".into(),
                status: "False".into(),
                reason: "Unschedulable".into(),
                message: "pod group is unschedulable".into(),
            }),
            members: vec![
                MemberView {
                    pod: "train-0".into(),
                    node: Some("mcsched-east".into()),
                    leaf_node: Some("east-1".into()),
                    phase: "Running".into(),
                    waiting: None,
                },
                MemberView {
                    pod: "train-1".into(),
                    node: None,
                    leaf_node: None,
                    phase: "Pending".into(),
                    waiting: Some("pod group is unschedulable, waiting for minCount pods from a gang to be scheduled".into()),
                },
            ],
        };
        let text = render(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "PODGROUP default/train  POLICY gang (minCount 3)  TOPOLOGY mcsched.io/cluster"
        );
        assert_eq!(
            lines[1],
            "PodGroupScheduled: False (Unschedulable): pod group is unschedulable"
        );
        assert_eq!(
            lines[2],
            "members: 2 (1 bound: 0 in the host, 1 in leaves); domain east"
        );
        assert!(lines[4].starts_with("POD "), "{text}");
        assert!(
            lines[5].contains("mcsched-east") && lines[5].contains("east-1"),
            "{text}"
        );
        assert!(
            lines[6].ends_with("waiting for minCount pods from a gang to be scheduled"),
            "{text}"
        );
    }
}
