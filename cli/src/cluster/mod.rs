//! `join cluster`, `unjoin cluster` and `get clusters`: a leaf cluster becomes (or stops
//! being) a virtual node of the host.

pub mod get;
pub mod join;
pub mod leaf_access;
pub mod names;
pub mod unjoin;

use anyhow::Context;
use console::style;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

/// One line of progress, as each step completes.
pub fn step(done: &str) {
    eprintln!("{} {done}", style("✓").green());
}

pub fn warn(msg: &str) {
    eprintln!("{} {msg}", style("!").yellow());
}

/// The HTTP status of an API error, if it is one.
pub fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A cluster's id: the UID of its `kube-system` namespace, which lives as long as the
/// cluster does.
pub async fn cluster_id(client: &Client, which: &str) -> anyhow::Result<String> {
    Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .with_context(|| {
            format!("reading the {which}'s kube-system namespace (its UID is the {which}'s id)")
        })?
        .metadata
        .uid
        .filter(|u| !u.is_empty())
        .with_context(|| format!("the {which}'s kube-system namespace has no UID"))
}

/// The host's id, as the agent computes it: what every object mcsched creates in a leaf
/// carries in [`mcsched_shared::keys::HOST_ID_LABEL`].
pub async fn host_id(host: &Client) -> anyhow::Result<String> {
    cluster_id(host, "host").await
}
