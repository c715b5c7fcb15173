//! Creating a pod's leaf copy with every field of the host pod, including those the
//! agent's Kubernetes types do not know (read from the host pod's JSON as served).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client};
use mcsched_engine::leaf::unknown_fields;

/// Creates `copy` in `leaf`; the fields of host pod `ns/name` its types dropped are put
/// back first (a second read of the host pod, as JSON).
pub(crate) async fn create(
    host: &Client,
    leaf: &Client,
    ns: &str,
    name: &str,
    copy: &Pod,
) -> Result<Pod, kube::Error> {
    let pods = ApiResource::erase::<Pod>(&());
    let raw = Api::<DynamicObject>::namespaced_with(host.clone(), ns, &pods)
        .get_opt(name)
        .await?
        .and_then(|o| serde_json::to_value(o).ok());
    let grafted = match &raw {
        Some(raw) => unknown_fields::of_pod(raw).map(|unknown| (raw, unknown)),
        None => None,
    };
    let Some((raw, unknown)) = grafted else {
        return Api::<Pod>::namespaced(leaf.clone(), ns)
            .create(&PostParams::default(), copy)
            .await;
    };
    let mut value = serde_json::to_value(copy).map_err(kube::Error::SerdeError)?;
    unknown_fields::graft(&mut value, &unknown, raw);
    let object: DynamicObject = serde_json::from_value(value).map_err(kube::Error::SerdeError)?;
    let created = Api::<DynamicObject>::namespaced_with(leaf.clone(), ns, &pods)
        .create(&PostParams::default(), &object)
        .await?;
    serde_json::to_value(created)
        .and_then(serde_json::from_value)
        .map_err(kube::Error::SerdeError)
}
