//! A budget of failed bearer-token authentications, per client address and in all: each
//! TokenReview of a token not cached takes from both, a token that authenticates gives
//! it back. Random tokens then cost the shared auth client (its QPS is the API server's
//! budget for every TokenReview and SubjectAccessReview) a bounded rate, and a client
//! past its budget is answered 429 without a review; cached tokens and client
//! certificates (the API server's front proxy) are never held back.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::control::ratelimit::Bucket;

/// Failures one address may have at once, then per second.
pub const PER_IP_BURST: u32 = 10;
pub const PER_IP_QPS: f64 = 1.0;
/// Failures every address together may have, then per second: a fifth of the auth
/// client's default 50 QPS.
pub const TOTAL_BURST: u32 = 50;
pub const TOTAL_QPS: f64 = 10.0;
/// Addresses tracked at most; past it, addresses with a full budget are forgotten.
const MAX_ADDRESSES: usize = 10_000;

/// Where requests without a known address (tests; none on a TCP listener) are counted.
const UNKNOWN: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

pub struct FailedAuthLimiter {
    buckets: Mutex<Buckets>,
    per_ip: (f64, u32),
}

struct Buckets {
    total: Bucket,
    per_ip: HashMap<IpAddr, Bucket>,
}

/// A review's place in the budget: given back when the token authenticates.
pub struct Reserved {
    ip: IpAddr,
}

impl FailedAuthLimiter {
    pub fn new(per_ip: (f64, u32), total: (f64, u32)) -> Self {
        FailedAuthLimiter {
            buckets: Mutex::new(Buckets {
                total: Bucket::new(total.0, total.1),
                per_ip: HashMap::new(),
            }),
            per_ip,
        }
    }

    /// A place for one more TokenReview from `ip`, or how long until there is one.
    pub fn reserve(&self, ip: Option<IpAddr>) -> Result<Reserved, Duration> {
        let ip = ip.unwrap_or(UNKNOWN);
        let now = Instant::now();
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if b.per_ip.len() >= MAX_ADDRESSES && !b.per_ip.contains_key(&ip) {
            b.per_ip.retain(|_, bucket| !bucket.is_full(now));
        }
        let (qps, burst) = self.per_ip;
        let Buckets { total, per_ip } = &mut *b;
        let mine = per_ip.entry(ip).or_insert_with(|| Bucket::new(qps, burst));
        mine.try_take(now)?;
        if let Err(wait) = total.try_take(now) {
            mine.give_back();
            return Err(wait);
        }
        Ok(Reserved { ip })
    }

    /// The token authenticated: its review was no failure.
    pub fn succeeded(&self, reserved: Reserved) {
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        b.total.give_back();
        if let Some(mine) = b.per_ip.get_mut(&reserved.ip) {
            mine.give_back();
        }
    }
}

impl Default for FailedAuthLimiter {
    fn default() -> Self {
        FailedAuthLimiter::new((PER_IP_QPS, PER_IP_BURST), (TOTAL_QPS, TOTAL_BURST))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().expect("ip"))
    }

    #[test]
    fn failures_are_bounded_per_address_and_in_all() {
        // Slow refills: the budgets are what the test sees.
        let limiter = FailedAuthLimiter::new((1e-6, 3), (1e-6, 5));
        for _ in 0..3 {
            assert!(limiter.reserve(ip("10.0.0.9")).is_ok());
        }
        assert!(limiter.reserve(ip("10.0.0.9")).is_err(), "its own budget");
        assert!(limiter.reserve(ip("10.0.0.1")).is_ok());
        assert!(limiter.reserve(ip("10.0.0.2")).is_ok());
        assert!(limiter.reserve(ip("10.0.0.3")).is_err(), "the total budget");
    }

    #[test]
    fn tokens_that_authenticate_cost_nothing() {
        let limiter = FailedAuthLimiter::new((1e-6, 1), (1e-6, 1));
        for _ in 0..10 {
            let r = limiter.reserve(ip("10.0.0.1")).expect("budget");
            limiter.succeeded(r);
        }
    }
}
