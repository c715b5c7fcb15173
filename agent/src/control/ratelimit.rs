//! client-go's client-side rate limit (QPS with a burst) as a tower layer under the kube
//! client, so `clientConnection.qps`/`burst` mean what they mean to kube-scheduler.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

// tokio's clock (the system's monotonic clock unless a test pauses it), so that tests in
// paused time see the limit as a real client would.
use tokio::time::Instant;
use tower::{Layer, Service};

/// The smallest rate the bucket honours (larger waits would overflow a Duration).
const MIN_QPS: f64 = 1e-6;

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Bucket {
            // A rate so small that the wait for a token would overflow a Duration is
            // taken as one token in about 12 days.
            qps: qps.max(MIN_QPS),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Returns a token taken for what turned out to cost nothing.
    pub fn give_back(&mut self) {
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }

    /// Whether the bucket has refilled to its burst by `now`.
    pub fn is_full(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens + elapsed * self.qps >= self.burst
    }

    /// Takes a token, or tells how long until one is there.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

#[derive(Clone)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Mutex<Bucket>>>,
}

impl RateLimitLayer {
    /// `qps <= 0` lifts the limit, as scheduler_perf does with a negative QPS.
    pub fn new(qps: f32, burst: u32) -> Self {
        RateLimitLayer {
            bucket: (qps > 0.0).then(|| Arc::new(Mutex::new(Bucket::new(f64::from(qps), burst)))),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            has_token: false,
        }
    }
}

pub struct RateLimit<S> {
    inner: S,
    bucket: Option<Arc<Mutex<Bucket>>>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    has_token: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.bucket {
            while !self.has_token {
                if let Some(sleep) = self.sleep.as_mut() {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.sleep = None;
                }
                let taken = bucket
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .try_take(Instant::now());
                match taken {
                    Ok(()) => self.has_token = true,
                    Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.has_token = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10.0, 3);
        assert!(b.try_take(t0).is_ok());
        assert!(b.try_take(t0).is_ok());
        assert!(b.try_take(t0).is_ok());
        let wait = b.try_take(t0).err().unwrap_or_default();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        assert!(b.try_take(t0 + Duration::from_millis(100)).is_ok());
        // Idle time refills up to the burst only.
        for _ in 0..3 {
            assert!(b.try_take(t0 + Duration::from_secs(10)).is_ok());
        }
        assert!(b.try_take(t0 + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn a_vanishing_rate_waits_long_but_does_not_panic() {
        let t0 = Instant::now();
        let mut b = Bucket::new(f64::from(1e-40f32), 1);
        assert!(b.try_take(t0).is_ok());
        let wait = b.try_take(t0).err().unwrap_or_default();
        assert_eq!(wait, Duration::from_secs(1_000_000));
    }
}
