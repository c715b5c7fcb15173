//! Building test objects in a real cluster.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// Creates a Node from JSON, then writes its status through `/status` (a create does not
/// keep the status it was given). A merge patch, as controllers may touch the new node
/// in between.
pub async fn create_node(client: &Client, node: serde_json::Value) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(node)?;
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Node> = Api::all(client.clone());
    api.create(&PostParams::default(), &node).await?;
    let status = serde_json::json!({ "status": node.status });
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}
