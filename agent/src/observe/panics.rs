//! The last defence against a bug that input can reach: a panic inside one pod's
//! attempt (its scheduling or binding cycle, its pod sync, a what-if) ends that attempt
//! and never the process. Without it one pod takes the leader down, then the standby that
//! takes the Lease on the same pod, and nobody's pods are scheduled.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// `f`, or the panic's message. The caller undoes what the attempt had done and fails the
/// pod; state shared across attempts is behind locks that recover from poisoning.
pub async fn guarded<F: Future>(point: &'static str, f: F) -> Result<F::Output, String> {
    AssertUnwindSafe(f).catch_unwind().await.map_err(|panic| {
        let message = message(&*panic);
        mcsched_engine::metrics::global().recovered_panic(point);
        tracing::error!(point, panic = %message, "panic caught: this attempt failed, the agent goes on (a bug: please report it)");
        message
    })
}

/// What a panic says: its `&str` or `String` payload.
pub fn message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_its_message() {
        let r = guarded("scheduling", async { panic!("bad {}", 1) }).await;
        assert_eq!(r, Err::<(), _>("bad 1".to_string()));
        assert_eq!(guarded("scheduling", async { 2 }).await, Ok(2));
    }
}
