//! PrioritySort: higher priority first, then the earlier queued.

use super::helper::queue_sort::priority_less;
use crate::framework::{Plugin, QueueSortPlugin, QueuedPodInfo};

pub(crate) const NAME: &str = "PrioritySort";

pub(crate) struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        priority_less(a, b)
    }
}
