//! Pure data and rules shared by the agent and the CLI: no tokio, no network.

pub mod keys;
pub mod node;
pub mod quantity;
pub mod resources;
pub mod taints;
