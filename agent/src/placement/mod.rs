//! The placement policies' controllers, run by the leader every few seconds (see
//! `scheduler::spawn_policy_status`): the policies' status, the pod-deletion-cost of
//! pods that keep their shape, and failover once a cluster toleration ran out.
//! Rebalancing stays in `scheduler/`: it is a scheduling what-if.

pub mod cluster_failover;
pub mod deletion_cost;
pub mod policy_status;
