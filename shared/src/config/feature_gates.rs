//! kube-scheduler v1.37's `--feature-gates`: the gates its process knows (kube's own, the
//! API server's, client-go's and component-base's, as `feature_gates.tsv` lists them, written
//! by `make feature-gates` from the release's own registry), parsed and checked with
//! component-base's rules and words: an unknown gate, a locked one set against its lock, a
//! gate on whose dependencies are off are errors.

use std::collections::BTreeMap;

/// `name<TAB>default<TAB>stage<TAB>locked<TAB>dependencies`, sorted by name.
const TABLE: &str = include_str!("feature_gates.tsv");

/// The release the table was read from.
pub const RELEASE: &str = "v1.37";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    pub default: bool,
    /// `ALPHA`, `BETA`, `GA` or `DEPRECATED`.
    pub stage: &'static str,
    pub locked: bool,
    pub dependencies: Vec<&'static str>,
}

/// Every gate of the release, by name.
pub fn known() -> &'static BTreeMap<&'static str, Gate> {
    static KNOWN: std::sync::OnceLock<BTreeMap<&'static str, Gate>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(|| {
        TABLE
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|line| {
                let mut f = line.split('\t');
                let name = f.next()?;
                let default = f.next()? == "true";
                let stage = f.next()?;
                let locked = f.next()? == "true";
                let dependencies = f
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .filter(|d| !d.is_empty())
                    .collect();
                Some((
                    name,
                    Gate {
                        name,
                        default,
                        stage,
                        locked,
                        dependencies,
                    },
                ))
            })
            .collect()
    })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("missing bool value for {0}")]
    MissingValue(String),
    #[error(
        "invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax"
    )]
    InvalidValue { name: String, value: String },
    #[error("unrecognized feature gate: {0}")]
    Unrecognized(String),
    #[error("cannot set feature gate {name} to {value}, feature is locked to {locked}")]
    Locked {
        name: String,
        value: bool,
        locked: bool,
    },
    #[error("{name} is enabled, but depends on features that are disabled: [{}]", .disabled.join(" "))]
    DependencyDisabled { name: String, disabled: Vec<String> },
}

/// Gates as set: each known gate's value, the defaults where not set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureGates {
    set: BTreeMap<String, bool>,
}

/// Go's strconv.ParseBool.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

impl FeatureGates {
    /// `A=true,B=false` as component-base's `featureGate.Set` reads it.
    pub fn parse(s: &str) -> Result<FeatureGates, FeatureGateError> {
        let mut set = BTreeMap::new();
        for item in s.split(',').filter(|i| !i.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), v.trim()),
                None => return Err(FeatureGateError::MissingValue(item.trim().to_string())),
            };
            let on = parse_bool(value).ok_or_else(|| FeatureGateError::InvalidValue {
                name: name.to_string(),
                value: value.to_string(),
            })?;
            let Some(gate) = known().get(name) else {
                return Err(FeatureGateError::Unrecognized(name.to_string()));
            };
            if gate.locked && on != gate.default {
                return Err(FeatureGateError::Locked {
                    name: name.to_string(),
                    value: on,
                    locked: gate.default,
                });
            }
            set.insert(name.to_string(), on);
        }
        let gates = FeatureGates { set };
        for gate in known().values() {
            if !gates.enabled(gate.name) {
                continue;
            }
            let disabled: Vec<String> = gate
                .dependencies
                .iter()
                .filter(|d| !gates.enabled(d))
                .map(|d| d.to_string())
                .collect();
            if !disabled.is_empty() {
                return Err(FeatureGateError::DependencyDisabled {
                    name: gate.name.to_string(),
                    disabled,
                });
            }
        }
        Ok(gates)
    }

    /// Whether `name` is on: as set, else `AllAlpha`/`AllBeta` for a gate of that stage
    /// set, else its default. An unknown name is off.
    pub fn enabled(&self, name: &str) -> bool {
        if let Some(on) = self.set.get(name) {
            return *on;
        }
        let Some(gate) = known().get(name) else {
            return false;
        };
        let all = match gate.stage {
            "ALPHA" => self.set.get("AllAlpha"),
            "BETA" => self.set.get("AllBeta"),
            _ => None,
        };
        all.copied().unwrap_or(gate.default)
    }

    /// The gates set explicitly, as `--feature-gates` gave them.
    pub fn explicit(&self) -> impl Iterator<Item = (&str, bool)> {
        self.set.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_v1_37s() {
        let k = known();
        assert!(k.len() > 200, "{} gates", k.len());
        let g = &k["GenericWorkload"];
        assert_eq!((g.default, g.stage, g.locked), (false, "BETA", false));
        assert!(k["NodeDeclaredFeatures"].default);
        assert_eq!(
            k["TopologyAwareWorkloadScheduling"].dependencies,
            vec!["GenericWorkload"]
        );
        assert!(
            !k.contains_key("GangScheduling"),
            "folded into GenericWorkload"
        );
    }

    #[test]
    fn gates_parse_as_component_bases() {
        let g = FeatureGates::parse("GenericWorkload=true, TopologyAwareWorkloadScheduling=True")
            .expect("valid");
        assert!(g.enabled("GenericWorkload"));
        assert!(g.enabled("TopologyAwareWorkloadScheduling"));
        assert!(g.enabled("OpportunisticBatching"), "beta and on by default");
        assert!(!FeatureGates::default().enabled("GenericWorkload"));
        assert!(
            FeatureGates::parse("AllBeta=true")
                .expect("valid")
                .enabled("GenericWorkload")
        );
        let err = |s: &str| FeatureGates::parse(s).expect_err(s).to_string();
        assert_eq!(
            err("GangScheduling=true"),
            "unrecognized feature gate: GangScheduling"
        );
        assert_eq!(
            err("GenericWorkload"),
            "missing bool value for GenericWorkload"
        );
        assert_eq!(
            err("GenericWorkload=yes"),
            "invalid value of GenericWorkload=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
        assert_eq!(
            err("NodeDeclaredFeatures=false"),
            "cannot set feature gate NodeDeclaredFeatures to false, feature is locked to true"
        );
        assert_eq!(
            err("TopologyAwareWorkloadScheduling=true"),
            "TopologyAwareWorkloadScheduling is enabled, but depends on features that are disabled: [GenericWorkload]"
        );
    }
}
