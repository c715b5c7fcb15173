//! Building test objects in a real cluster.

use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::{Api, Client};

/// Creates a Node from JSON, then writes its status through `/status` (a create does not
/// keep the status it was given).
pub async fn create_node(client: &Client, node: serde_json::Value) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(node)?;
    let name = node.metadata.name.clone().unwrap_or_default();
    let api: Api<Node> = Api::all(client.clone());
    let mut created = api.create(&PostParams::default(), &node).await?;
    created.status = node.status;
    api.replace_status(&name, &PostParams::default(), &created)
        .await?;
    Ok(())
}
