//! The wire to API servers: the clients, their rate limit and request metrics, the leader's fence at the
//! connection, leader election, the watches (host and leaf alike) and the lean objects
//! they decode.

pub mod client;
pub mod fence;
pub mod leader;
pub mod lean_object;
pub mod ratelimit;
pub mod request_metrics;
pub mod watch;
