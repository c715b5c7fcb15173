//! The scheduling framework: extension points, statuses, cycle state, and the runtime
//! that runs a profile's plugins over a snapshot and records what each one said.

mod cycle_state;
mod fit_error;
mod interface;
mod members;
mod placement;
pub mod runtime;
mod status;
mod waiting_pods;

pub use cycle_state::CycleState;
pub(crate) use cycle_state::VOLUMES_KEY;
pub use fit_error::{Diagnosis, FitError};
pub use interface::*;
pub use members::{MemberNodes, Members};
pub use placement::PlacementAssignments;
pub use runtime::{
    Filtered, Framework, FrameworkError, ProfileSpec, ScheduleResult, fit_error, with_rejected,
};
pub use status::{Cause, Code, Status};
pub use waiting_pods::WaitingPod;
