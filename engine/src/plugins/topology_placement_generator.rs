//! TopologyPlacementGenerator (kube-scheduler v1.37, under
//! TopologyAwareWorkloadScheduling): a pod group with a topology constraint is tried in
//! each domain of its key; one without is tried on every node at once.

use std::collections::BTreeSet;

use crate::framework::{PlacementGeneratePlugin, Plugin, Status};

pub(crate) const NAME: &str = "TopologyPlacementGenerator";

pub(crate) struct TopologyPlacementGenerator;

impl Plugin for TopologyPlacementGenerator {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_placement_generate(&self) -> Option<&dyn PlacementGeneratePlugin> {
        Some(self)
    }
}

impl PlacementGeneratePlugin for TopologyPlacementGenerator {
    /// Domains in their names' order (kube's come from a Go map, in no order). None
    /// left: kube's framework's "no feasible placements found".
    fn generate_placements(
        &self,
        domains: Option<&BTreeSet<String>>,
    ) -> Result<Vec<Option<String>>, Status> {
        let Some(domains) = domains else {
            return Ok(vec![None]);
        };
        if domains.is_empty() {
            return Err(Status::unschedulable("no feasible placements found"));
        }
        Ok(domains.iter().cloned().map(Some).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_placement_per_domain_or_one_of_every_node() {
        let g = TopologyPlacementGenerator;
        assert_eq!(g.generate_placements(None).unwrap(), vec![None]);
        let domains: BTreeSet<String> = ["b".to_string(), "a".to_string()].into();
        assert_eq!(
            g.generate_placements(Some(&domains)).unwrap(),
            vec![Some("a".to_string()), Some("b".to_string())]
        );
        let none = g.generate_placements(Some(&BTreeSet::new())).unwrap_err();
        assert_eq!(none.message(), "no feasible placements found");
    }
}
