//! A gang's leaf copies wait for the whole gang: no member runs in a leaf until
//! `minCount` members are bound (host and leaves together), so a gang the scheduler
//! could not place whole never starts in part anywhere.

use k8s_openapi::api::core::v1::Pod;
use mcsched_engine::pod_groups::{PodGroups, group_key_of};

/// Why the copy of `pod` must wait, or None when it may be made.
pub(crate) fn held(groups: &PodGroups, pod: &Pod) -> Option<String> {
    let key = group_key_of(pod)?;
    let min = groups.policy(&key)?.gang_min_count?;
    let bound = groups.state(&key).assigned_count();
    (bound < min).then(|| {
        format!("waiting for the gang {key} to be bound whole: {bound} of minCount {min} pods bound")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcsched_engine::snapshot::PodInfo;
    use serde_json::json;
    use std::sync::Arc;

    fn member(name: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"containers": [], "nodeName": node,
                "schedulingGroup": {"podGroupName": "g"}}
        }))
        .expect("pod")
    }

    #[test]
    fn a_member_waits_until_min_count_members_are_bound() {
        let groups = PodGroups::new();
        groups.set_group(
            &serde_json::from_value(json!({
                "metadata": {"name": "g", "namespace": "ns"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
            }))
            .expect("group"),
        );
        let a = member("a", Some("mcsched-east"));
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(a.clone()))));
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(member("b", None)))));
        assert_eq!(
            held(&groups, &a).as_deref(),
            Some("waiting for the gang ns/g to be bound whole: 1 of minCount 2 pods bound")
        );
        groups.add_pod(Arc::new(PodInfo::new(Arc::new(member("b", Some("host-a"))))));
        assert_eq!(held(&groups, &a), None);
    }
}
