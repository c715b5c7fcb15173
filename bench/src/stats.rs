//! Throughput and latency from binding times, computed as scheduler_perf computes them.

use std::time::Duration;

/// scheduler_perf's SchedulingThroughput: one sample per second of the measured phase,
/// summarised by average and nearest-rank percentiles.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Throughput {
    pub samples: usize,
    pub average: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// Per-second samples as scheduler_perf's throughputCollector takes them: a tick every
/// second from `0` (the start of the measured pods' creation); a tick counts the pods
/// bound since the previous one, and ticks before the first binding are skipped. The
/// collector stops once every pod is bound, so the last, partial second is not a sample.
/// `bound_at` are the bindings' offsets from the start.
pub fn per_second_samples(bound_at: &[Duration]) -> Vec<f64> {
    let mut at: Vec<Duration> = bound_at.to_vec();
    at.sort();
    let Some(last) = at.last().copied() else {
        return Vec::new();
    };
    let mut samples = Vec::new();
    let mut counted = 0usize;
    let mut tick = 1u64;
    while Duration::from_secs(tick) <= last {
        let edge = Duration::from_secs(tick);
        let scheduled = at.partition_point(|d| *d < edge);
        if scheduled > 0 {
            samples.push((scheduled - counted) as f64);
            counted = scheduled;
        }
        tick += 1;
    }
    samples
}

/// Average and percentiles of the samples, with scheduler_perf's index
/// `ceil(len * p / 100) - 1` into the sorted samples.
pub fn summarise(samples: &[f64]) -> Throughput {
    if samples.is_empty() {
        return Throughput::default();
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let len = s.len();
    let perc = |p: usize| s[(len * p).div_ceil(100) - 1];
    Throughput {
        samples: len,
        average: s.iter().sum::<f64>() / len as f64,
        p50: perc(50),
        p90: perc(90),
        p99: perc(99),
    }
}

/// Pods per second from the first to the last binding (the bindings between them,
/// both ends counted as one interval per pod after the first).
pub fn first_to_last(bound_at: &[Duration]) -> Option<f64> {
    let first = bound_at.iter().min()?;
    let last = bound_at.iter().max()?;
    let span = last.saturating_sub(*first).as_secs_f64();
    (bound_at.len() > 1 && span > 0.0).then(|| (bound_at.len() - 1) as f64 / span)
}

/// Nearest-rank percentile of latencies.
pub fn percentile(values: &[Duration], p: usize) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort();
    Some(v[(v.len() * p).div_ceil(100).max(1) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn samples_per_second_skip_the_start_and_the_partial_end() {
        // Nothing in the first second, 3 in the second, 1 in the third, 2 after 3 s.
        let at = [ms(1100), ms(1200), ms(1900), ms(2500), ms(3100), ms(3200)];
        assert_eq!(per_second_samples(&at), vec![3.0, 1.0]);
        assert_eq!(per_second_samples(&[]), Vec::<f64>::new());
    }

    #[test]
    fn percentiles_use_scheduler_perfs_index() {
        let samples: Vec<f64> = (1..=10).map(f64::from).collect();
        let t = summarise(&samples);
        assert_eq!(t.samples, 10);
        assert_eq!(t.average, 5.5);
        assert_eq!(t.p50, 5.0);
        assert_eq!(t.p90, 9.0);
        assert_eq!(t.p99, 10.0);
        assert_eq!(summarise(&[]), Throughput::default());
    }

    #[test]
    fn first_to_last_and_latency() {
        assert_eq!(first_to_last(&[ms(1000), ms(1500), ms(3000)]), Some(1.0));
        assert_eq!(first_to_last(&[ms(1000)]), None);
        let lat: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&lat, 99), Some(ms(99)));
        assert_eq!(percentile(&lat, 50), Some(ms(50)));
        assert_eq!(percentile(&[], 99), None);
    }
}
