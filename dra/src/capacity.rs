//! Consumable capacity (kube's consumable_capacity.go): how much of a device's capacity a
//! request consumes under the capacity's request policy, and whether it still fits.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, CapacityRequirements, DeviceCapacity,
};

use crate::quantity::Quantity;
use crate::state::ConsumedCapacity;

const NOT_REPRESENTABLE: &str =
    "capacity request cannot be represented in the device's range arithmetic";

fn q(api: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Result<Quantity, String> {
    Quantity::from_api(api).map_err(|e| e.to_string())
}

fn requested<'a>(
    req: Option<&'a CapacityRequirements>,
    name: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    req.and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get(name))
}

/// kube's CmpRequestOverCapacity: whether the request fits the device's capacities given
/// what is consumed already (`current`) and by this allocation attempt (`allocating`).
pub fn request_fits(
    current: &ConsumedCapacity,
    request: Option<&CapacityRequirements>,
    capacity: Option<&BTreeMap<String, DeviceCapacity>>,
    allocating: Option<&ConsumedCapacity>,
    fractional: bool,
) -> Result<bool, String> {
    let empty = BTreeMap::new();
    let capacity = capacity.unwrap_or(&empty);
    if let Some(reqs) = request.and_then(|r| r.requests.as_ref())
        && reqs.keys().any(|name| !capacity.contains_key(name))
    {
        return Ok(false);
    }
    let mut consumed = BTreeMap::new();
    for (name, cap) in capacity {
        let value = requested(request, name).map(q).transpose()?;
        let c = consumed_capacity(value, cap, fractional)
            .map_err(|e| format!("capacity {name:?}: {e}"))?;
        if c.signum() < 0 {
            return Err(format!("capacity {name:?}: capacity value is negative"));
        }
        consumed.insert(name.clone(), c);
    }
    for (name, cap) in capacity {
        let c = consumed[name];
        if violates_policy(c, cap.request_policy.as_ref(), fractional)? {
            return Ok(false);
        }
        let mut total = current
            .get(name)
            .copied()
            .unwrap_or(Quantity::ZERO)
            .saturating_add(c);
        if let Some(a) = allocating.and_then(|a| a.get(name)) {
            total = total.saturating_add(*a);
        }
        if total > q(&cap.value)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// kube's GetConsumedCapacityFromRequest.
pub fn consumed_from_request(
    request: Option<&CapacityRequirements>,
    capacity: Option<&BTreeMap<String, DeviceCapacity>>,
    fractional: bool,
) -> Result<ConsumedCapacity, String> {
    let mut out = BTreeMap::new();
    for (name, cap) in capacity.into_iter().flatten() {
        let value = requested(request, name).map(q).transpose()?;
        let c = consumed_capacity(value, cap, fractional)
            .map_err(|e| format!("capacity {name:?}: {e}"))?;
        out.insert(name.clone(), c);
    }
    Ok(out)
}

fn consumed_capacity(
    requested: Option<Quantity>,
    cap: &DeviceCapacity,
    fractional: bool,
) -> Result<Quantity, String> {
    let Some(requested) = requested else {
        return match cap.request_policy.as_ref().and_then(|p| p.default.as_ref()) {
            Some(d) => q(d),
            None => q(&cap.value),
        };
    };
    let Some(policy) = &cap.request_policy else {
        return Ok(requested);
    };
    if let Some(range) = &policy.valid_range {
        return round_up_range(requested, range, fractional);
    }
    if let Some(values) = &policy.valid_values {
        for v in values {
            let v = q(v)?;
            if requested <= v {
                return Ok(v);
            }
        }
    }
    Ok(requested)
}

fn safe_milli(v: Quantity) -> Option<i64> {
    let m = v.milli_value();
    (Quantity::from_milli(m, v.format()) == v).then_some(m)
}

fn use_milli(range: &CapacityRequestPolicyRange, fractional: bool) -> Result<bool, String> {
    if !fractional {
        return Ok(false);
    }
    for (i, v) in [Some(&range.min), range.max.as_ref(), range.step.as_ref()]
        .into_iter()
        .enumerate()
    {
        let Some(v) = v else { continue };
        let Some(m) = safe_milli(q(v)?) else {
            return Ok(false);
        };
        if i == 2 && m < 1 {
            return Ok(false);
        }
    }
    Ok(true)
}

fn round_up_range(
    requested: Quantity,
    range: &CapacityRequestPolicyRange,
    fractional: bool,
) -> Result<Quantity, String> {
    let min = q(&range.min)?;
    if requested < min {
        return Ok(min);
    }
    let Some(step) = &range.step else {
        return Ok(requested);
    };
    let step = q(step)?;
    if use_milli(range, fractional)? {
        let requested_milli = safe_milli(requested).ok_or_else(|| {
            format!("{NOT_REPRESENTABLE}: request {requested} is not a representable milli value")
        })?;
        let (step_milli, min_milli) = (step.milli_value(), min.milli_value());
        let added = requested_milli - min_milli;
        let mut n = added / step_milli;
        if added % step_milli != 0 {
            n += 1;
        }
        if n > (i64::MAX - min_milli) / step_milli {
            return Err(format!(
                "{NOT_REPRESENTABLE}: rounding request {requested} up to the next step passes the milli-value range"
            ));
        }
        let v = min_milli + step_milli * n;
        return Ok(if v % 1000 == 0 {
            Quantity::from_int(v / 1000, step.format())
        } else {
            Quantity::from_milli(v, step.format())
        });
    }
    if requested > Quantity::from_int(i64::MAX, requested.format()) {
        return Err(format!(
            "{NOT_REPRESENTABLE}: request {requested} exceeds MaxInt64"
        ));
    }
    let (r, s, m) = (requested.value(), step.value(), min.value());
    if s == 0 {
        return Ok(requested);
    }
    let added = r - m;
    let mut n = added / s;
    if added % s != 0 {
        n += 1;
    }
    if m >= 0 && n > (i64::MAX - m) / s {
        return Err(format!(
            "{NOT_REPRESENTABLE}: rounding request {requested} up to the next step passes MaxInt64"
        ));
    }
    Ok(Quantity::from_int(m + s * n, step.format()))
}

fn violates_policy(
    v: Quantity,
    policy: Option<&CapacityRequestPolicy>,
    fractional: bool,
) -> Result<bool, String> {
    let Some(policy) = policy else {
        return Ok(false);
    };
    if let Some(d) = &policy.default
        && q(d)? == v
    {
        return Ok(false);
    }
    if let Some(range) = &policy.valid_range {
        if let Some(max) = &range.max
            && v > q(max)?
        {
            return Ok(true);
        }
        if let Some(step) = &range.step {
            let min = q(&range.min)?;
            let step = q(step)?;
            let (r, s, m) = if use_milli(range, fractional)? {
                let Some(r) = safe_milli(v) else {
                    return Ok(true);
                };
                (r, step.milli_value(), min.milli_value())
            } else {
                (v.value(), step.value(), min.value())
            };
            if s != 0 && (r - m) % s != 0 {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    if let Some(values) = policy.valid_values.as_ref().filter(|v| !v.is_empty()) {
        for valid in values {
            if q(valid)? == v {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    Ok(false)
}
