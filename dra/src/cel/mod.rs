//! Device selectors in CEL, as k8s.io/dynamic-resource-allocation/cel: the `device`
//! variable (driver, attributes and capacity by domain, allowMultipleAllocations), the
//! quantity and semver functions, a cost limit, and a cache of compiled expressions.

mod cost;
mod functions;
mod references;
mod values;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use cel::common::ast::{Expr, IdedExpr, LiteralValue};
use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value};
use k8s_openapi::api::resource::v1::{DeviceAttribute, DeviceCapacity};

use crate::quantity::Quantity;

/// `resourceapi.CELSelectorExpressionMaxCost`.
pub const SELECTOR_MAX_COST: u64 = 1_000_000;

/// A device as selectors see it (kube's `cel.Device`).
pub struct DeviceInput<'a> {
    pub driver: &'a str,
    pub allow_multiple_allocations: Option<bool>,
    pub attributes: Option<&'a BTreeMap<String, DeviceAttribute>>,
    pub capacity: Option<&'a BTreeMap<String, DeviceCapacity>>,
}

/// One compiled selector.
pub struct Compiled {
    program: Program,
    /// The string literals of the expression: the domains it may look up. A domain the
    /// device has nothing in still yields an empty map, as kube's map with a default.
    literals: Vec<String>,
    max_cost: u64,
}

/// Compiled CEL expressions, shared across calls (kube's cel.Cache); thread-safe.
pub struct CelCache {
    env: Arc<Env>,
    root: Context<'static, 'static>,
    max_entries: usize,
    entries: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    tick: u64,
    map: HashMap<String, (Arc<Compiled>, u64)>,
}

impl CelCache {
    pub fn new(max_entries: usize) -> Self {
        let mut env = Env::stdlib();
        // The strings extension (kube's ext.Strings): lowerAscii, split, ...
        // Registration only fails on a duplicate name, which these are not.
        let _ = env.add_extension(cel::extensions::strings);
        let env = Arc::new(env);
        let mut root = Context::with_env(env.clone());
        if let Err(e) = functions::register(&mut root) {
            tracing::error!(error = %e, "registering Kubernetes CEL functions");
        }
        CelCache {
            env,
            root,
            max_entries: max_entries.max(1),
            entries: Mutex::new(Lru::default()),
        }
    }

    /// The compiled expression, or upstream's compile error text.
    pub fn get_or_compile(&self, expression: &str) -> Result<Arc<Compiled>, String> {
        {
            let mut lru = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            lru.tick += 1;
            let tick = lru.tick;
            if let Some((c, t)) = lru.map.get_mut(expression) {
                *t = tick;
                return Ok(c.clone());
            }
        }
        let program = self
            .env
            .compile(expression)
            .map_err(|e| format!("compilation failed: {e}"))?;
        references::check(&program, expression, &self.env, &self.root)?;
        let mut literals = Vec::new();
        collect_literals(program.expression(), &mut literals);
        let max_cost = cost::estimate(program.expression());
        let compiled = Arc::new(Compiled {
            program,
            literals,
            max_cost,
        });
        let mut lru = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if lru.map.len() >= self.max_entries
            && let Some(oldest) = lru
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
        {
            lru.map.remove(&oldest);
        }
        let tick = lru.tick;
        lru.map
            .insert(expression.to_string(), (compiled.clone(), tick));
        Ok(compiled)
    }

    /// Whether the device matches, or the runtime error's text.
    pub fn device_matches(
        &self,
        compiled: &Compiled,
        device: &DeviceInput,
    ) -> Result<bool, String> {
        if compiled.max_cost > SELECTOR_MAX_COST {
            return Err("operation cancelled: actual cost limit exceeded".into());
        }
        let attributes = device_attributes(device, &compiled.literals)?;
        let capacity = device_capacity(device, &compiled.literals)?;
        let mut fields: HashMap<Key, Value> = HashMap::new();
        fields.insert(
            key("driver"),
            Value::String(Arc::new(device.driver.to_string())),
        );
        fields.insert(
            key("allowMultipleAllocations"),
            Value::Bool(device.allow_multiple_allocations.unwrap_or(false)),
        );
        fields.insert(key("attributes"), attributes);
        fields.insert(key("capacity"), capacity);
        let mut ctx = self.root.new_inner_scope();
        ctx.add_variable_from_value(
            "device",
            Value::Map(Map {
                map: Arc::new(fields),
            }),
        );
        match compiled.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "CEL result of type {:?} could not be converted to bool",
                other.type_of()
            )),
            Err(e) => Err(enhance_runtime_error(e.to_string())),
        }
    }
}

/// kube's cel.EnhanceRuntimeError.
fn enhance_runtime_error(msg: String) -> String {
    if msg.to_lowercase().contains("no such key:") {
        format!(
            "{msg}. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
        )
    } else {
        msg
    }
}

fn key(s: &str) -> Key {
    Key::String(Arc::new(s.to_string()))
}

/// kube's parseQualifiedName: `domain/id`, or the driver's domain for a bare id.
fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

fn by_domain(entries: Vec<(&str, &str, Value)>, literals: &[String]) -> Value {
    let mut domains: HashMap<String, HashMap<Key, Value>> = HashMap::new();
    for (domain, id, value) in entries {
        domains
            .entry(domain.to_string())
            .or_default()
            .insert(key(id), value);
    }
    for lit in literals {
        domains.entry(lit.clone()).or_default();
    }
    let outer: HashMap<Key, Value> = domains
        .into_iter()
        .map(|(d, m)| (key(&d), Value::Map(Map { map: Arc::new(m) })))
        .collect();
    Value::Map(Map {
        map: Arc::new(outer),
    })
}

fn device_attributes(device: &DeviceInput, literals: &[String]) -> Result<Value, String> {
    let mut entries = Vec::new();
    for (name, attr) in device.attributes.into_iter().flatten() {
        let value = attribute_value(attr).map_err(|e| format!("attribute {name}: {e}"))?;
        let (domain, id) = split_qualified(name, device.driver);
        entries.push((domain, id, value));
    }
    Ok(by_domain(entries, literals))
}

fn device_capacity(device: &DeviceInput, literals: &[String]) -> Result<Value, String> {
    let mut entries = Vec::new();
    for (name, cap) in device.capacity.into_iter().flatten() {
        let q = Quantity::from_api(&cap.value).map_err(|e| format!("capacity {name}: {e}"))?;
        let (domain, id) = split_qualified(name, device.driver);
        entries.push((domain, id, functions::quantity_value(q)));
    }
    Ok(by_domain(entries, literals))
}

fn attribute_value(attr: &DeviceAttribute) -> Result<Value, String> {
    let version = |s: &str| {
        semver::Version::parse(s)
            .map(functions::semver_value)
            .map_err(|e| format!("parse semantic version: {e}"))
    };
    if let Some(v) = &attr.ints {
        return Ok(Value::List(Arc::new(
            v.iter().map(|i| Value::Int(*i)).collect(),
        )));
    }
    if let Some(v) = &attr.bools {
        return Ok(Value::List(Arc::new(
            v.iter().map(|b| Value::Bool(*b)).collect(),
        )));
    }
    if let Some(v) = &attr.strings {
        return Ok(Value::List(Arc::new(
            v.iter()
                .map(|s| Value::String(Arc::new(s.clone())))
                .collect(),
        )));
    }
    if let Some(v) = &attr.versions {
        return Ok(Value::List(Arc::new(
            v.iter()
                .map(|s| version(s))
                .collect::<Result<Vec<_>, _>>()?,
        )));
    }
    if let Some(i) = attr.int {
        return Ok(Value::Int(i));
    }
    if let Some(b) = attr.bool {
        return Ok(Value::Bool(b));
    }
    if let Some(s) = &attr.string {
        return Ok(Value::String(Arc::new(s.clone())));
    }
    if let Some(s) = &attr.version {
        return version(s);
    }
    Err("unsupported attribute value".into())
}

fn collect_literals(e: &IdedExpr, out: &mut Vec<String>) {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => out.push(s.inner().to_string()),
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                collect_literals(t, out);
            }
            c.args.iter().for_each(|a| collect_literals(a, out));
        }
        Expr::Select(s) => collect_literals(&s.operand, out),
        Expr::List(l) => l.elements.iter().for_each(|a| collect_literals(a, out)),
        Expr::Map(m) => {
            for en in &m.entries {
                if let cel::common::ast::EntryExpr::MapEntry(me) = &en.expr {
                    collect_literals(&me.key, out);
                    collect_literals(&me.value, out);
                }
            }
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                collect_literals(x, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, DeviceAttribute)]) -> BTreeMap<String, DeviceAttribute> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn eval(
        expr: &str,
        a: &BTreeMap<String, DeviceAttribute>,
        c: &BTreeMap<String, DeviceCapacity>,
    ) -> Result<bool, String> {
        let cache = CelCache::new(10);
        let compiled = cache.get_or_compile(expr)?;
        cache.device_matches(
            &compiled,
            &DeviceInput {
                driver: "driver.example.com",
                allow_multiple_allocations: None,
                attributes: Some(a),
                capacity: Some(c),
            },
        )
    }

    #[test]
    fn device_variable_and_kubernetes_functions() {
        let a = attrs(&[
            (
                "model",
                DeviceAttribute {
                    string: Some("a100".into()),
                    ..Default::default()
                },
            ),
            (
                "other.example.com/driverVersion",
                DeviceAttribute {
                    version: Some("1.2.3".into()),
                    ..Default::default()
                },
            ),
        ]);
        let mut c = BTreeMap::new();
        c.insert(
            "memory".to_string(),
            DeviceCapacity {
                value: k8s_openapi::apimachinery::pkg::api::resource::Quantity("40Gi".into()),
                request_policy: None,
            },
        );
        let t = |e: &str| eval(e, &a, &c);
        assert_eq!(t(r#"device.driver == "driver.example.com""#), Ok(true));
        assert_eq!(
            t(r#"device.attributes["driver.example.com"].model == "a100""#),
            Ok(true)
        );
        assert_eq!(
            t(r#"device.attributes["driver.example.com"].model == "h100""#),
            Ok(false)
        );
        assert_eq!(
            t(
                r#"device.attributes["other.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))"#
            ),
            Ok(true)
        );
        assert_eq!(
            t(r#"device.attributes["other.example.com"].driverVersion == semver("1.2.3")"#),
            Ok(true)
        );
        assert_eq!(
            t(r#"device.capacity["driver.example.com"].memory.compareTo(quantity("32Gi")) >= 0"#),
            Ok(true)
        );
        assert_eq!(
            t(r#"device.capacity["driver.example.com"].memory.isLessThan(quantity("32Gi"))"#),
            Ok(false)
        );
        assert_eq!(t(r#"device.allowMultipleAllocations"#), Ok(false));
        // A domain the device has nothing in is an empty map, not an error.
        assert_eq!(
            t(r#"has(device.attributes["unknown.example.com"].model)"#),
            Ok(false)
        );
        let err = t(r#"device.attributes["unknown.example.com"].model == "x""#).unwrap_err();
        assert!(
            err.contains("consider using CEL optional chaining"),
            "{err}"
        );
        assert!(t("1 +").is_err());
    }

    #[test]
    fn selectors_as_written_in_practice() {
        let a = attrs(&[
            (
                "productName",
                DeviceAttribute {
                    string: Some("NVIDIA A100-SXM4-40GB".into()),
                    ..Default::default()
                },
            ),
            (
                "index",
                DeviceAttribute {
                    int: Some(3),
                    ..Default::default()
                },
            ),
            (
                "mig",
                DeviceAttribute {
                    bool: Some(false),
                    ..Default::default()
                },
            ),
        ]);
        let c = BTreeMap::new();
        let t = |e: &str| eval(e, &a, &c);
        let d = r#"device.attributes["driver.example.com"]"#;
        assert_eq!(
            t(&format!(
                r#"{d}.productName.lowerAscii().matches("^nvidia a100.*")"#
            )),
            Ok(true)
        );
        assert_eq!(
            t(&format!(
                r#"{d}.productName.startsWith("NVIDIA") && {d}.index < 4"#
            )),
            Ok(true)
        );
        assert_eq!(
            t(&format!(r#""productName" in {d} && !("missing" in {d})"#)),
            Ok(true)
        );
        assert_eq!(
            t(&format!(r#"{d}.?missing.orValue("none") == "none""#)),
            Ok(true)
        );
        assert_eq!(
            t(&format!(r#"{d}.mig == false && size({d}) == 3"#)),
            Ok(true)
        );
        assert_eq!(
            t(r#"device.attributes.exists(domain, domain == "driver.example.com")"#),
            Ok(true)
        );
        assert_eq!(
            t(r#"isQuantity("1Gi") && !isQuantity("1Xi") && quantity("1Gi").isInteger()"#),
            Ok(true)
        );
        assert_eq!(
            t(
                r#"quantity("1.5").asApproximateFloat() == 1.5 && quantity("2k").asInteger() == 2000"#
            ),
            Ok(true)
        );
        assert_eq!(
            t(
                r#"quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi") && quantity("1").sub(1).sign() == 0"#
            ),
            Ok(true)
        );
        assert_eq!(
            t(
                r#"semver("v1.02", true) == semver("1.2.0") && isSemver("1.2.3") && !isSemver("1.2")"#
            ),
            Ok(true)
        );
        assert_eq!(
            t(
                r#"semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3"#
            ),
            Ok(true)
        );
        assert_eq!(
            t(
                r#"semver("1.2.3-alpha").isLessThan(semver("1.2.3")) && semver("1.2.3+b1").compareTo(semver("1.2.3")) == 0"#
            ),
            Ok(true)
        );
        // Not a bool: kube's message.
        assert!(
            t(r#"device.driver"#)
                .unwrap_err()
                .contains("could not be converted to bool")
        );
    }

    #[test]
    fn cost_limit_refuses_expensive_expressions() {
        let a = BTreeMap::new();
        let c = BTreeMap::new();
        let list = format!(
            "[{}]",
            (0..100)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let cheap = format!("{list}.all(x, x >= 0)");
        assert_eq!(eval(&cheap, &a, &c), Ok(true));
        let expensive = format!("{list}.all(x, {list}.all(y, {list}.all(z, x + y + z >= 0)))");
        assert_eq!(
            eval(&expensive, &a, &c),
            Err("operation cancelled: actual cost limit exceeded".into())
        );
    }
}
