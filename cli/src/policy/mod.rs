//! `kubectl mcsched get policies`: the placement policies and what the agent reports of
//! them (their status).

pub mod get;
