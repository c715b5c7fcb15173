//! Device taints against a request's tolerations (kube's taintPreventsAllocation and
//! resourceclaim.ToleratesTaint).

use k8s_openapi::api::resource::v1::{Device, DeviceTaint, DeviceToleration};

/// Whether a NoSchedule or NoExecute taint of the device is not tolerated; other effects
/// (None, unknown ones) never prevent allocation.
pub fn taint_prevents_allocation(device: &Device, tolerations: &[DeviceToleration]) -> bool {
    device.taints.iter().flatten().any(|taint| {
        matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|t| tolerates(t, taint))
    })
}

fn tolerates(toleration: &DeviceToleration, taint: &DeviceTaint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> DeviceTaint {
        DeviceTaint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn effects_and_operators() {
        let device = |t: DeviceTaint| Device {
            name: "d".into(),
            taints: Some(vec![t]),
            ..Default::default()
        };
        let exists = DeviceToleration {
            key: Some("k".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        };
        let equal_other = DeviceToleration {
            key: Some("k".into()),
            value: Some("other".into()),
            ..Default::default()
        };
        assert!(taint_prevents_allocation(
            &device(taint("k", "v", "NoSchedule")),
            &[]
        ));
        assert!(taint_prevents_allocation(
            &device(taint("k", "v", "NoExecute")),
            &[]
        ));
        assert!(!taint_prevents_allocation(
            &device(taint("k", "v", "None")),
            &[]
        ));
        assert!(!taint_prevents_allocation(
            &device(taint("k", "v", "NoSchedule")),
            &[exists]
        ));
        assert!(taint_prevents_allocation(
            &device(taint("k", "v", "NoSchedule")),
            &[equal_other]
        ));
    }
}
