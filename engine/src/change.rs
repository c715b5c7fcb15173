//! A watch event reduced to what a cache needs: the vocabulary shared by the watches that
//! produce it and the indexes (cache, policies, leaf views) that consume it, so that
//! neither side imports the other.

use std::sync::Arc;

use kube::{Resource, ResourceExt};

/// `Apply`'s flag tells a new object.
pub enum Change<K> {
    Apply(Arc<K>, bool),
    Delete(Arc<K>),
}

impl<K> Change<K> {
    pub fn object(&self) -> &Arc<K> {
        match self {
            Change::Apply(o, _) | Change::Delete(o) => o,
        }
    }
}

/// `namespace/name`, or `/name` for cluster-scoped objects.
pub fn key_of<K: Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.as_deref().unwrap_or_default(),
        o.name_any()
    )
}
