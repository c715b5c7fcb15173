use std::future::Future;
use std::time::Duration;

/// Polls `probe` every 200 ms until it yields `Some`, or fails after `timeout` with `what`.
pub async fn until<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(match last_error {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow::anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
