//! Dynamic Resource Allocation objects as API objects, as scheduler_perf's DRA workloads
//! write them (no driver runs): a DeviceClass of one driver, one ResourceSlice per node
//! with one device `gpu-0` of a `model`, templates and pods asking for a model by CEL.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

pub const DRIVER: &str = "gpu.example.com";

/// A namespaced object (in `default`) from JSON.
pub async fn create<K>(client: &Client, object: Value) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?;
    Ok(())
}

/// A cluster-scoped object (DeviceClass, ResourceSlice, DeviceTaintRule) from JSON.
pub async fn create_cluster_scoped<K>(client: &Client, object: Value) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?;
    Ok(())
}

/// A request's selectors: the device's `model` attribute is `model`.
pub fn selector(model: &str) -> Value {
    json!([{"cel": {"expression": format!("device.attributes[{DRIVER:?}].model == {model:?}")}}])
}

/// Ready nodes with one device `gpu-0` of `model` each, published in a slice of their own.
pub async fn nodes_with_devices(client: &Client, nodes: &[(&str, &str)]) -> anyhow::Result<()> {
    for &(node, model) in nodes {
        crate::objects::ready_node(
            client,
            node,
            "8",
            "32Gi",
            json!({"kubernetes.io/hostname": node}),
        )
        .await?;
        create_cluster_scoped::<ResourceSlice>(
            client,
            json!({
                "metadata": {"name": format!("{node}-gpus")},
                "spec": {"driver": DRIVER, "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0", "attributes": {"model": {"string": model}}}]}
            }),
        )
        .await?;
    }
    Ok(())
}

/// The driver's DeviceClass.
pub async fn device_class(client: &Client) -> anyhow::Result<()> {
    create_cluster_scoped::<DeviceClass>(
        client,
        json!({
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == {DRIVER:?}")}}]}
        }),
    )
    .await
}

/// The ResourceClaimTemplate `model`, asking for one device of that model.
pub async fn template(client: &Client, model: &str) -> anyhow::Result<()> {
    create::<ResourceClaimTemplate>(
        client,
        json!({
            "metadata": {"name": model},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": DRIVER, "selectors": selector(model)}}]}}}
        }),
    )
    .await
}

/// Pod `name` of `scheduler` with one claim `gpu`: from the template `template`, or the
/// claim `named`; only on node `only_on` when given.
pub async fn pod(
    client: &Client,
    scheduler: &str,
    name: &str,
    claim: PodClaim<'_>,
    only_on: Option<&str>,
) -> anyhow::Result<()> {
    let claim = match claim {
        PodClaim::Named(c) => json!({"name": "gpu", "resourceClaimName": c}),
        PodClaim::Template(t) => json!({"name": "gpu", "resourceClaimTemplateName": t}),
    };
    let mut spec = json!({"schedulerName": scheduler, "resourceClaims": [claim],
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"claims": [{"name": "gpu"}]}}]});
    if let Some(node) = only_on {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    create::<Pod>(client, json!({"metadata": {"name": name}, "spec": spec})).await
}

/// Where a pod's claim `gpu` comes from.
#[derive(Debug, Clone, Copy)]
pub enum PodClaim<'a> {
    Template(&'a str),
    Named(&'a str),
}
