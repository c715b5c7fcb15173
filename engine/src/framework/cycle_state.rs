//! Data plugins keep between the extension points of one scheduling cycle.

use std::any::Any;

/// The cycle's storage objects (`Arc<VolumeObjects>`), written by the framework before
/// PreFilter: Filter sees no snapshot, and a profile may enable a volume plugin's Filter
/// without its PreFilter (v1beta2's defaults do).
pub(crate) const VOLUMES_KEY: &str = "framework/volumes";

/// Cloneable so preemption can try removing victims on a copy.
pub(crate) trait StateData: Any + Send + Sync {
    fn clone_data(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A few entries per cycle, read for every node: a vector scanned by key beats hashing.
#[derive(Default)]
pub struct CycleState {
    data: Vec<(&'static str, Box<dyn StateData>)>,
    /// Nodes whose Filter must be skipped by a plugin whose PreFilter returned Skip.
    skip_filter: Vec<&'static str>,
    skip_score: Vec<&'static str>,
    /// Whether this cycle's plugin timings go to the metrics (a sample of cycles).
    record_plugin_metrics: bool,
    /// A what-if or an explanation, not a pod's own cycle: what it asks of the leaves
    /// is remembered briefly and apart from live pods' questions.
    dry_run: bool,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, v.as_ref().clone_data()))
                .collect(),
            skip_filter: self.skip_filter.clone(),
            skip_score: self.skip_score.clone(),
            record_plugin_metrics: self.record_plugin_metrics,
            dry_run: self.dry_run,
        }
    }
}

impl CycleState {
    pub fn new() -> Self {
        Self::default()
    }

    fn position(&self, key: &str) -> Option<usize> {
        // Keys are plugin-name constants: pointer equality almost always settles it.
        self.data.iter().position(|(k, _)| {
            (std::ptr::eq(k.as_ptr(), key.as_ptr()) && k.len() == key.len()) || *k == key
        })
    }

    pub(crate) fn write<T: Any + Clone + Send + Sync>(&mut self, key: &'static str, value: T) {
        match self.position(key) {
            Some(i) => self.data[i].1 = Box::new(value),
            None => self.data.push((key, Box::new(value))),
        }
    }

    pub(crate) fn read<T: Any>(&self, key: &'static str) -> Option<&T> {
        let i = self.position(key)?;
        self.data[i].1.as_ref().as_any().downcast_ref()
    }

    pub(crate) fn read_mut<T: Any>(&mut self, key: &'static str) -> Option<&mut T> {
        let i = self.position(key)?;
        self.data[i].1.as_mut().as_any_mut().downcast_mut()
    }

    pub fn set_record_plugin_metrics(&mut self, record: bool) {
        self.record_plugin_metrics = record;
    }

    pub(crate) fn should_record_plugin_metrics(&self) -> bool {
        self.record_plugin_metrics
    }

    pub fn set_dry_run(&mut self) {
        self.dry_run = true;
    }

    pub(crate) fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    pub(crate) fn skip_filter(&mut self, plugin: &'static str) {
        self.skip_filter.push(plugin);
    }

    pub(crate) fn skips_filter(&self, plugin: &str) -> bool {
        self.skip_filter.contains(&plugin)
    }

    pub(crate) fn skip_score(&mut self, plugin: &'static str) {
        self.skip_score.push(plugin);
    }

    pub(crate) fn skips_score(&self, plugin: &str) -> bool {
        self.skip_score.contains(&plugin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_data_round_trips_and_clones_deeply() {
        let mut s = CycleState::new();
        s.write("a", vec![1, 2]);
        let mut copy = s.clone();
        if let Some(v) = copy.read_mut::<Vec<i32>>("a") {
            v.push(3);
        }
        assert_eq!(s.read::<Vec<i32>>("a"), Some(&vec![1, 2]));
        assert_eq!(copy.read::<Vec<i32>>("a"), Some(&vec![1, 2, 3]));
        assert!(s.read::<String>("a").is_none());
    }
}
