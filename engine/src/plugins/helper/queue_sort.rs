//! The order pods wait in: PrioritySort's, which the scheduling queue also uses when no
//! QueueSort plugin is configured.

use crate::framework::QueuedPodInfo;

/// Whether `a` goes before `b`: higher priority first, then the earlier queued.
pub(crate) fn priority_less(a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
    let (pa, pb) = (a.pod.priority(), b.pod.priority());
    pa > pb || (pa == pb && a.timestamp < b.timestamp)
}
