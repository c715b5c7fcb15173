//! kube-scheduler's node tree (`backend/cache/node_tree.go`): node names by zone, zones in
//! the order first seen, nodes of a zone in the order added. The snapshot lists nodes
//! interleaved zone by zone, so that a search that stops after `numFeasibleNodesToFind`
//! nodes from a rotating start sees every zone, and a start index names the same node as
//! in kube-scheduler.

use std::collections::{BTreeMap, HashMap};

/// kube's `GetZoneKey`: the region and zone labels (the deprecated beta ones first, as
/// kube reads them), or "" without either.
pub(crate) fn zone_key(labels: &BTreeMap<String, String>) -> String {
    let get = |beta: &str, ga: &str| {
        labels
            .get(beta)
            .or_else(|| labels.get(ga))
            .map(String::as_str)
            .unwrap_or_default()
    };
    let zone = get(
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    );
    let region = get(
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    );
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    // A NUL in the separator, as kube's, in case a region or zone holds a colon.
    format!("{region}:\0:{zone}")
}

#[derive(Debug, Default, Clone)]
pub(crate) struct NodeTree {
    tree: HashMap<String, Vec<String>>,
    zones: Vec<String>,
    len: usize,
}

impl NodeTree {
    pub(crate) fn add(&mut self, name: &str, zone: &str) {
        match self.tree.get_mut(zone) {
            Some(names) if names.iter().any(|n| n == name) => return,
            Some(names) => names.push(name.to_string()),
            None => {
                self.zones.push(zone.to_string());
                self.tree.insert(zone.to_string(), vec![name.to_string()]);
            }
        }
        self.len += 1;
    }

    /// Whether it was there.
    pub(crate) fn remove(&mut self, name: &str, zone: &str) -> bool {
        let Some(names) = self.tree.get_mut(zone) else {
            return false;
        };
        let Some(i) = names.iter().position(|n| n == name) else {
            return false;
        };
        names.remove(i);
        if names.is_empty() {
            self.tree.remove(zone);
            self.zones.retain(|z| z != zone);
        }
        self.len -= 1;
        true
    }

    /// A node whose zone changed goes to the end of its new zone.
    pub(crate) fn update(&mut self, name: &str, old_zone: &str, new_zone: &str) {
        if old_zone != new_zone {
            self.remove(name, old_zone);
            self.add(name, new_zone);
        }
    }

    #[cfg(test)]
    pub(crate) fn zones(&self) -> usize {
        self.zones.len()
    }

    /// Node names interleaved: the first of every zone, then the second of every zone,
    /// and so on, zones in the order first seen.
    pub(crate) fn list(&self) -> Vec<&str> {
        let mut out = Vec::with_capacity(self.len);
        let arrays: Vec<&Vec<String>> =
            self.zones.iter().filter_map(|z| self.tree.get(z)).collect();
        let longest = arrays.iter().map(|a| a.len()).max().unwrap_or(0);
        for i in 0..longest {
            out.extend(arrays.iter().filter_map(|a| a.get(i)).map(String::as_str));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn zone_keys_read_the_beta_labels_first() {
        assert_eq!(zone_key(&labels(&[])), "");
        assert_eq!(
            zone_key(&labels(&[("topology.kubernetes.io/zone", "a")])),
            ":\0:a"
        );
        assert_eq!(
            zone_key(&labels(&[
                ("topology.kubernetes.io/region", "r"),
                ("topology.kubernetes.io/zone", "a"),
                ("failure-domain.beta.kubernetes.io/zone", "b"),
            ])),
            "r:\0:b"
        );
    }

    /// kube's node_tree_test: nodes of three zones added in turn list interleaved.
    #[test]
    fn lists_nodes_interleaved_zone_by_zone() {
        let mut t = NodeTree::default();
        for (n, z) in [
            ("node-1", "z1"),
            ("node-2", "z2"),
            ("node-3", "z2"),
            ("node-4", "z3"),
            ("node-5", "z1"),
            ("node-6", "z1"),
        ] {
            t.add(n, z);
        }
        t.add("node-1", "z1");
        assert_eq!(
            t.list(),
            ["node-1", "node-2", "node-4", "node-5", "node-3", "node-6"]
        );
        // Removing keeps the order of what stays; an emptied zone goes.
        assert!(t.remove("node-4", "z3"));
        assert!(!t.remove("node-4", "z3"));
        assert_eq!(t.zones(), 2);
        assert_eq!(t.list(), ["node-1", "node-2", "node-5", "node-3", "node-6"]);
        // A node moved to another zone goes to its end.
        t.update("node-1", "z1", "z2");
        assert_eq!(t.list(), ["node-5", "node-2", "node-6", "node-3", "node-1"]);
        t.update("node-5", "z1", "z1");
        assert_eq!(t.list(), ["node-5", "node-2", "node-6", "node-3", "node-1"]);
    }
}
