//! What plugins share, so that no plugin imports another: score normalisation
//! (kube-scheduler's `helper.DefaultNormalizeScore`) here, and one module per shared
//! algorithm or record.

pub mod cluster_placement;
pub(crate) mod node_affinity;
pub mod placement_state;
pub(crate) mod queue_sort;
pub(crate) mod resources;
pub mod taints;
pub(crate) mod volumes;

use crate::framework::MAX_NODE_SCORE;

/// Scales scores so the highest becomes `max`; with `reverse`, high raw scores become
/// low. All zeros stay zeros (or all `max` when reversed).
pub(crate) fn default_normalize_score(max: i64, reverse: bool, scores: &mut [i64]) {
    let highest = scores.iter().copied().max().unwrap_or(0);
    if highest == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max);
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut v = max * *s / highest;
        if reverse {
            v = max - v;
        }
        *s = v;
    }
}

pub(crate) fn normalize_to_max(scores: &mut [i64]) {
    default_normalize_score(MAX_NODE_SCORE, false, scores)
}

/// kube-scheduler's `helper.BuildBrokenLinearFunction` at utilization `p`: linear between
/// the shape's `(utilization, score)` points, flat before the first and after the last;
/// 0 for no points.
pub(crate) fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    let Some(first) = shape.first() else {
        return 0;
    };
    if p <= first.0 {
        return first.1;
    }
    for w in shape.windows(2) {
        let ((u0, s0), (u1, s1)) = (w[0], w[1]);
        if p <= u1 {
            return s0 + (s1 - s0) * (p - u0) / (u1 - u0);
        }
    }
    shape.last().map(|l| l.1).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_kube_scheduler() {
        let mut s = [0, 5, 10];
        default_normalize_score(100, false, &mut s);
        assert_eq!(s, [0, 50, 100]);
        let mut s = [0, 5, 10];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, [100, 50, 0]);
        let mut s = [0, 0];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, [100, 100]);
    }
}
