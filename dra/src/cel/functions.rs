//! Kubernetes' CEL extension functions that device selectors use: the quantity library
//! (k8s.io/apiserver/pkg/cel/library/quantity.go) and the semver library (semverlib.go).
//! Methods both libraries define (`isLessThan`, `isGreaterThan`, `compareTo`) dispatch on
//! the receiver's type.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::{Context, DeclarationError, ExecutionError, FunctionContext, Value};
use mcsched_shared::quantity::Format;

use super::values::{CelQuantity, CelSemver};
use crate::quantity::Quantity;

type Result<T> = std::result::Result<T, ExecutionError>;

pub fn register(ctx: &mut Context<'static, 'static>) -> std::result::Result<(), DeclarationError> {
    ctx.add_function("quantity", quantity)?;
    ctx.add_function("isQuantity", is_quantity)?;
    ctx.add_function("semver", semver_fn)?;
    ctx.add_function("isSemver", is_semver)?;
    ctx.add_function("sign", sign)?;
    ctx.add_function("isInteger", is_integer)?;
    ctx.add_function("asInteger", as_integer)?;
    ctx.add_function("asApproximateFloat", as_approximate_float)?;
    ctx.add_function("add", add)?;
    ctx.add_function("sub", sub)?;
    ctx.add_function("isLessThan", is_less_than)?;
    ctx.add_function("isGreaterThan", is_greater_than)?;
    ctx.add_function("compareTo", compare_to)?;
    ctx.add_function("major", major)?;
    ctx.add_function("minor", minor)?;
    ctx.add_function("patch", patch)?;
    Ok(())
}

pub fn quantity_value(q: Quantity) -> Value {
    Value::Opaque(Arc::new(CelQuantity(q)))
}

pub fn semver_value(v: semver::Version) -> Value {
    Value::Opaque(Arc::new(CelSemver(v)))
}

fn as_quantity(v: &Value) -> Option<Quantity> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<CelQuantity>().map(|q| q.0),
        _ => None,
    }
}

fn as_semver(v: &Value) -> Option<&semver::Version> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<CelSemver>().map(|s| &s.0),
        _ => None,
    }
}

fn no_overload(ftx: &FunctionContext) -> ExecutionError {
    ftx.error("no such overload")
}

fn quantity(ftx: &FunctionContext, s: Arc<String>) -> Result<Value> {
    Quantity::parse(&s)
        .map(quantity_value)
        .map_err(|e| ftx.error(e.to_string()))
}

fn is_quantity(s: Arc<String>) -> bool {
    Quantity::parse(&s).is_ok()
}

/// blang/semver's Parse, or with `normalize` semverlib's normalizeAndParse (a leading
/// `v` dropped, leading zeros trimmed, missing minor and patch filled with 0).
fn parse_semver(s: &str, normalize: bool) -> std::result::Result<semver::Version, String> {
    let text = if normalize {
        normalize_semver(s)
    } else {
        s.to_string()
    };
    semver::Version::parse(&text).map_err(|e| format!("{e}"))
}

fn normalize_semver(s: &str) -> String {
    let s = s.strip_prefix('v').unwrap_or(s);
    let mut parts: Vec<String> = s.splitn(3, '.').map(str::to_string).collect();
    for p in parts.iter_mut() {
        if p.len() > 1 {
            let trimmed = p.trim_start_matches('0');
            *p = if trimmed.is_empty() || !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                format!("0{trimmed}")
            } else {
                trimmed.to_string()
            };
        }
    }
    while parts.len() < 3 {
        parts.push("0".into());
    }
    parts.join(".")
}

fn semver_fn(ftx: &FunctionContext, Arguments(args): Arguments) -> Result<Value> {
    let (s, normalize) = semver_args(ftx, &args)?;
    parse_semver(&s, normalize)
        .map(semver_value)
        .map_err(|e| ftx.error(format!("unable to parse semver: {e}")))
}

fn is_semver(ftx: &FunctionContext, Arguments(args): Arguments) -> Result<bool> {
    let (s, normalize) = semver_args(ftx, &args)?;
    Ok(parse_semver(&s, normalize).is_ok())
}

fn semver_args(ftx: &FunctionContext, args: &[Value]) -> Result<(Arc<String>, bool)> {
    match args {
        [Value::String(s)] => Ok((s.clone(), false)),
        [Value::String(s), Value::Bool(n)] => Ok((s.clone(), *n)),
        _ => Err(no_overload(ftx)),
    }
}

fn this_quantity(ftx: &FunctionContext, this: &Value) -> Result<Quantity> {
    as_quantity(this).ok_or_else(|| no_overload(ftx))
}

fn sign(ftx: &FunctionContext, This(this): This<Value>) -> Result<i64> {
    Ok(this_quantity(ftx, &this)?.signum())
}

fn is_integer(ftx: &FunctionContext, This(this): This<Value>) -> Result<bool> {
    Ok(this_quantity(ftx, &this)?.is_integer())
}

fn as_integer(ftx: &FunctionContext, This(this): This<Value>) -> Result<i64> {
    let q = this_quantity(ftx, &this)?;
    if !q.is_integer() {
        return Err(ftx.error("cannot convert value to integer"));
    }
    Ok(q.value())
}

fn as_approximate_float(ftx: &FunctionContext, This(this): This<Value>) -> Result<f64> {
    Ok(this_quantity(ftx, &this)?.as_approximate_float())
}

fn operand(ftx: &FunctionContext, arg: &Value) -> Result<Quantity> {
    match arg {
        Value::Int(i) => Ok(Quantity::from_int(*i, Format::DecimalSI)),
        other => as_quantity(other).ok_or_else(|| no_overload(ftx)),
    }
}

fn add(ftx: &FunctionContext, This(this): This<Value>, arg: Value) -> Result<Value> {
    let q = this_quantity(ftx, &this)?;
    Ok(quantity_value(q.saturating_add(operand(ftx, &arg)?)))
}

fn sub(ftx: &FunctionContext, This(this): This<Value>, arg: Value) -> Result<Value> {
    let q = this_quantity(ftx, &this)?;
    Ok(quantity_value(q.saturating_sub(operand(ftx, &arg)?)))
}

fn compare(ftx: &FunctionContext, this: &Value, other: &Value) -> Result<Ordering> {
    if let (Some(a), Some(b)) = (as_quantity(this), as_quantity(other)) {
        return Ok(a.cmp(&b));
    }
    if let (Some(a), Some(b)) = (as_semver(this), as_semver(other)) {
        return Ok(a.cmp_precedence(b));
    }
    Err(no_overload(ftx))
}

fn is_less_than(ftx: &FunctionContext, This(this): This<Value>, other: Value) -> Result<bool> {
    Ok(compare(ftx, &this, &other)? == Ordering::Less)
}

fn is_greater_than(ftx: &FunctionContext, This(this): This<Value>, other: Value) -> Result<bool> {
    Ok(compare(ftx, &this, &other)? == Ordering::Greater)
}

fn compare_to(ftx: &FunctionContext, This(this): This<Value>, other: Value) -> Result<i64> {
    Ok(match compare(ftx, &this, &other)? {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

fn this_semver<'a>(ftx: &FunctionContext, this: &'a Value) -> Result<&'a semver::Version> {
    as_semver(this).ok_or_else(|| no_overload(ftx))
}

fn major(ftx: &FunctionContext, This(this): This<Value>) -> Result<i64> {
    Ok(this_semver(ftx, &this)?.major as i64)
}

fn minor(ftx: &FunctionContext, This(this): This<Value>) -> Result<i64> {
    Ok(this_semver(ftx, &this)?.minor as i64)
}

fn patch(ftx: &FunctionContext, This(this): This<Value>) -> Result<i64> {
    Ok(this_semver(ftx, &this)?.patch as i64)
}
