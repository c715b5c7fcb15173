//! What the agent keeps of the join Secret a leaf was connected from: the leaf cluster
//! holds it, the token renewer writes through it; neither needs the other for it.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct JoinSecret {
    pub name: String,
    pub namespace: String,
    pub kubeconfig: String,
    pub lifetime: Option<Duration>,
}
