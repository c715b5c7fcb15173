//! What the agent tells: Events and status writes, their recorder, the explanations of
//! its decisions (served by `api::server`), and telemetry. The engine's metrics are
//! `mcsched_engine::metrics`.

pub mod event_recorder;
pub mod events;
pub mod explain;
pub mod panics;
pub mod telemetry;
