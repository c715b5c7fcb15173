//! Facts about a pod that the agent and the CLI both read.

use k8s_openapi::api::core::v1::Pod;

use crate::keys::KUBE_DEFAULT_SCHEDULER_NAME;

/// The profile a pod names: `spec.schedulerName`, kube's default-scheduler when unset.
pub fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or(KUBE_DEFAULT_SCHEDULER_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_means_kubes_default_scheduler() {
        let mut pod = Pod::default();
        assert_eq!(scheduler_name(&pod), "default-scheduler");
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            scheduler_name: Some("mcsched".into()),
            ..Default::default()
        });
        assert_eq!(scheduler_name(&pod), "mcsched");
    }
}
