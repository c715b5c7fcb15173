//! From text to the validated model.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::catalog::{self, Legacy, Point};
use super::feature_gates::FeatureGates;
use super::model::*;
use super::raw::*;
use super::{ConfigErrors, GROUP, VERSIONS, duration, plugin_args};

/// `gates`: the ones that change kube-scheduler's default plugins (its
/// applyFeatureGates; the others are on or off in both).
pub(super) fn decode(text: &str, gates: &FeatureGates) -> Result<SchedulerConfig, ConfigErrors> {
    let topology_aware = gates.enabled("TopologyAwareWorkloadScheduling");
    let mut errs = ConfigErrors(Vec::new());
    let raw: RawConfig = match crate::yaml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            // crate::yaml puts the field path first and the line and column last.
            let msg = e.to_string();
            let (path, message) = match msg.split_once(": ") {
                Some((p, m)) if !p.contains(' ') => (p.to_string(), m.to_string()),
                _ => ("<document>".to_string(), msg),
            };
            errs.push(path, message);
            return Err(errs);
        }
    };
    let version = check_type(&raw, &mut errs);
    let version_owned = match version {
        Some(v) => v,
        None => return Err(errs),
    };
    let version = version_owned.as_str();
    let multi_point_versions = ["v1", "v1beta3"];
    let mut cfg = SchedulerConfig {
        api_version: format!("{GROUP}/{version}"),
        parallelism: 16,
        percentage_of_nodes_to_score: None,
        pod_initial_backoff_seconds: 1,
        pod_max_backoff_seconds: 10,
        leader_election: LeaderElection::default(),
        client_connection: ClientConnection::default(),
        profiles: Vec::new(),
        extenders: Vec::new(),
        enable_profiling: raw.enable_profiling.unwrap_or(true),
        warnings: Vec::new(),
    };

    if let Some(p) = raw.parallelism {
        if p <= 0 {
            errs.push(
                "parallelism",
                format!("should be an integer value greater than zero, got {p}"),
            );
        } else {
            cfg.parallelism = p as u32;
        }
    }
    if let Some(p) = raw.percentage_of_nodes_to_score {
        if !(0..=100).contains(&p) {
            errs.push(
                "percentageOfNodesToScore",
                format!("not in valid range [0-100], got {p}"),
            );
        } else if p > 0 {
            cfg.percentage_of_nodes_to_score = Some(p as u32);
        }
    }
    if let Some(b) = raw.pod_initial_backoff_seconds {
        if b <= 0 {
            errs.push(
                "podInitialBackoffSeconds",
                format!("must be greater than 0, got {b}"),
            );
        } else {
            cfg.pod_initial_backoff_seconds = b as u64;
        }
    }
    if let Some(b) = raw.pod_max_backoff_seconds {
        if b <= 0 {
            errs.push(
                "podMaxBackoffSeconds",
                format!("must be greater than 0, got {b}"),
            );
        } else {
            cfg.pod_max_backoff_seconds = b as u64;
        }
    }
    if cfg.pod_max_backoff_seconds < cfg.pod_initial_backoff_seconds {
        errs.push(
            "podMaxBackoffSeconds",
            format!(
                "must be greater than or equal to podInitialBackoffSeconds ({})",
                cfg.pod_initial_backoff_seconds
            ),
        );
    }
    if version != "v1" && raw.delay_cache_until_active.is_some() {
        errs.push(
            "delayCacheUntilActive",
            format!("not a field of {GROUP}/{version}"),
        );
    }
    if !matches!(version, "v1beta1" | "v1beta2") {
        if raw.healthz_bind_address.is_some() {
            errs.push(
                "healthzBindAddress",
                format!("not a field of {GROUP}/{version}"),
            );
        }
        if raw.metrics_bind_address.is_some() {
            errs.push(
                "metricsBindAddress",
                format!("not a field of {GROUP}/{version}"),
            );
        }
    }

    if let Some(le) = &raw.leader_election {
        leader_election(le, &mut cfg.leader_election, &mut errs);
    }
    if let Some(cc) = &raw.client_connection {
        let c = &mut cfg.client_connection;
        c.kubeconfig = cc.kubeconfig.clone().filter(|k| !k.is_empty());
        if let Some(q) = cc.qps {
            c.qps = q;
        }
        if let Some(b) = cc.burst {
            if b < 0 {
                errs.push(
                    "clientConnection.burst",
                    format!("must not be negative, got {b}"),
                );
            } else {
                c.burst = b as u32;
            }
        }
        if let Some(t) = &cc.content_type {
            match supported_media_type(t) {
                // Empty is the default, as kube-scheduler's defaulting makes it.
                Ok(Some(m)) => c.content_type = m.to_string(),
                Ok(None) => {}
                Err(e) => errs.push("clientConnection.contentType", e),
            }
        }
        if let Some(t) = &cc.accept_content_types {
            let mut accepted = Vec::new();
            for part in t.split(',') {
                match supported_media_type(part) {
                    Ok(Some(m)) => accepted.push(m),
                    Ok(None) if t.trim().is_empty() => {}
                    Ok(None) => errs.push(
                        "clientConnection.acceptContentTypes",
                        format!("empty entry in {t:?}"),
                    ),
                    Err(e) => errs.push("clientConnection.acceptContentTypes", e),
                }
            }
            c.accept_content_types = accepted.join(",");
        }
    }

    let raw_profiles = raw.profiles.unwrap_or_default();
    let raw_profiles = if raw_profiles.is_empty() {
        vec![RawProfile::default()]
    } else {
        raw_profiles
    };
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, rp) in raw_profiles.iter().enumerate() {
        let path = format!("profiles[{i}]");
        let name = rp
            .scheduler_name
            .clone()
            .unwrap_or_else(|| crate::keys::KUBE_DEFAULT_SCHEDULER_NAME.to_string());
        if name.is_empty() {
            errs.push(
                format!("{path}.schedulerName"),
                "Required value: schedulerName must not be empty",
            );
        } else if let Some(first) = names.insert(name.clone(), i) {
            errs.push(
                format!("{path}.schedulerName"),
                format!("Duplicate value: {name:?} (also profiles[{first}].schedulerName)"),
            );
        }
        let mut percentage = None;
        if let Some(p) = rp.percentage_of_nodes_to_score {
            if version != "v1" {
                errs.push(
                    format!("{path}.percentageOfNodesToScore"),
                    format!("not a field of {GROUP}/{version}"),
                );
            } else if !(0..=100).contains(&p) {
                errs.push(
                    format!("{path}.percentageOfNodesToScore"),
                    format!("not in valid range [0-100], got {p}"),
                );
            } else if p > 0 {
                percentage = Some(p as u32);
            }
        }
        let multi_point = multi_point_versions.contains(&version);
        let (plugins, mut warnings, fit_strategy) = resolve_plugins(
            version,
            multi_point,
            topology_aware,
            rp.plugins.as_ref(),
            &path,
            &mut errs,
        );
        cfg.warnings.append(&mut warnings);
        let mut args = PluginArgs::default();
        if let Some(strategy) = fit_strategy {
            args.node_resources_fit.strategy = strategy;
        }
        plugin_args::apply(
            rp.plugin_config.as_deref().unwrap_or_default(),
            &path,
            &mut args,
            &mut errs,
        );
        plugin_args::require_args(
            rp.plugin_config.as_deref().unwrap_or_default(),
            &plugins,
            &path,
            &mut errs,
        );
        cfg.profiles.push(Profile {
            scheduler_name: name,
            percentage_of_nodes_to_score: percentage,
            plugins,
            args,
        });
    }

    // kube-scheduler: "queue sort plugins must be the same across profiles".
    if let Some(first) = cfg.profiles.first() {
        let qs: Vec<String> = first
            .plugins
            .queue_sort
            .iter()
            .map(|p| p.name.clone())
            .collect();
        for (i, p) in cfg.profiles.iter().enumerate().skip(1) {
            let other: Vec<String> = p
                .plugins
                .queue_sort
                .iter()
                .map(|p| p.name.clone())
                .collect();
            if other != qs {
                errs.push(
                    format!("profiles[{i}].plugins.queueSort"),
                    format!("queueSort must be the same for all profiles: {other:?} differs from profiles[0]'s {qs:?}"),
                );
            }
        }
    }
    for (i, p) in cfg.profiles.iter().enumerate() {
        if p.plugins.queue_sort.len() > 1 {
            errs.push(
                format!("profiles[{i}].plugins.queueSort"),
                "only one queueSort plugin can be enabled",
            );
        }
        if p.plugins.bind.is_empty() {
            errs.push(
                format!("profiles[{i}].plugins.bind"),
                "at least one bind plugin is needed",
            );
        }
    }

    let mut binders = 0;
    for (i, re) in raw.extenders.unwrap_or_default().iter().enumerate() {
        if let Some(e) = extender(re, &format!("extenders[{i}]"), &mut errs) {
            if e.bind_verb.is_some() {
                binders += 1;
                if binders > 1 {
                    errs.push(
                        format!("extenders[{i}].bindVerb"),
                        "only one extender can implement bind",
                    );
                }
            }
            cfg.extenders.push(e);
        }
    }

    if errs.0.is_empty() {
        Ok(cfg)
    } else {
        Err(errs)
    }
}

fn check_type(raw: &RawConfig, errs: &mut ConfigErrors) -> Option<String> {
    match raw.kind.as_deref() {
        Some("KubeSchedulerConfiguration") => {}
        Some(k) => errs.push(
            "kind",
            format!("expected KubeSchedulerConfiguration, got {k:?}"),
        ),
        None => errs.push("kind", "Required value: kind: KubeSchedulerConfiguration"),
    }
    let Some(av) = raw.api_version.as_deref() else {
        errs.push(
            "apiVersion",
            format!("Required value: one of {GROUP}/{}", VERSIONS.join(", ")),
        );
        return None;
    };
    match av.split_once('/') {
        Some((group, v)) if group == GROUP && VERSIONS.contains(&v) => {
            if errs.0.is_empty() {
                Some(v.to_string())
            } else {
                None
            }
        }
        _ => {
            errs.push(
                "apiVersion",
                format!(
                    "unsupported {av:?}: use {GROUP}/ with {}",
                    VERSIONS.join(", ")
                ),
            );
            None
        }
    }
}

fn leader_election(le: &RawLeaderElection, out: &mut LeaderElection, errs: &mut ConfigErrors) {
    if let Some(v) = le.leader_elect {
        out.leader_elect = v;
    }
    let mut dur = |field: &str, value: &Option<String>, slot: &mut Duration| {
        if let Some(text) = value {
            match duration::parse(text) {
                Ok(d) => *slot = d,
                Err(e) => errs.push(format!("leaderElection.{field}"), e.to_string()),
            }
        }
    };
    dur("leaseDuration", &le.lease_duration, &mut out.lease_duration);
    dur("renewDeadline", &le.renew_deadline, &mut out.renew_deadline);
    dur("retryPeriod", &le.retry_period, &mut out.retry_period);
    if let Some(v) = &le.resource_lock {
        out.resource_lock = v.clone();
    }
    if let Some(v) = &le.resource_name {
        out.resource_name = v.clone();
    }
    if let Some(v) = &le.resource_namespace {
        out.resource_namespace = v.clone();
    }
    if !out.leader_elect {
        return;
    }
    // client-go's leaderelection rules.
    if out.lease_duration <= out.renew_deadline {
        errs.push(
            "leaderElection.leaseDuration",
            "must be greater than renewDeadline",
        );
    }
    if out.renew_deadline.as_secs_f64() <= out.retry_period.as_secs_f64() * 1.2 {
        errs.push(
            "leaderElection.renewDeadline",
            "must be greater than retryPeriod*1.2",
        );
    }
    if out.retry_period.is_zero() {
        errs.push("leaderElection.retryPeriod", "must be greater than zero");
    }
    if out.resource_lock != "leases" {
        errs.push(
            "leaderElection.resourceLock",
            format!(
                "{:?} is not supported: only \"leases\" (kube-scheduler's default)",
                out.resource_lock
            ),
        );
    }
    if out.resource_name.is_empty() {
        errs.push("leaderElection.resourceName", "Required value");
    }
    if out.resource_namespace.is_empty() {
        errs.push("leaderElection.resourceNamespace", "Required value");
    }
}

/// The default plugins of one extension point for this version, legacy names resolved.
fn defaults_for(version: &str, multi_point: bool, point: Point) -> Vec<(String, i32)> {
    let list: Vec<(&str, i32)> = if multi_point {
        catalog::V1_MULTI_POINT
            .iter()
            .copied()
            .filter(|(n, _)| catalog::implements(n, point))
            .collect()
    } else if version == "v1beta1" {
        catalog::v1beta1_defaults(point).to_vec()
    } else {
        catalog::v1beta2_defaults(point).to_vec()
    };
    let mut out: Vec<(String, i32)> = Vec::new();
    for (name, weight) in list {
        let name = match catalog::legacy(name) {
            Some(Legacy::Renamed(to)) => to,
            Some(Legacy::FitStrategy(_)) => "NodeResourcesFit",
            Some(Legacy::Removed) => continue,
            None => name,
        };
        if !catalog::implements(name, point) || out.iter().any(|(n, _)| n == name) {
            continue;
        }
        out.push((
            name.to_string(),
            weight.max(if point.weighted() { 1 } else { 0 }),
        ));
    }
    out
}

type Resolved = (Plugins, Vec<String>, Option<ScoringStrategyType>);

/// kube-scheduler's merge of defaults with `enabled`/`disabled` per extension point (and
/// multiPoint in v1/v1beta3): disabled defaults (or `*`) go, enabled plugins that are
/// defaults keep their place with the given weight, others are appended in order.
fn resolve_plugins(
    version: &str,
    multi_point: bool,
    topology_aware: bool,
    raw: Option<&RawPlugins>,
    path: &str,
    errs: &mut ConfigErrors,
) -> Resolved {
    let mut warnings = Vec::new();
    let mut fit_strategy = None;
    let empty = RawPluginSet::default();
    let set_of = |p: Point| -> &RawPluginSet {
        let Some(r) = raw else { return &empty };
        let s = match p {
            Point::PreEnqueue => &r.pre_enqueue,
            Point::QueueSort => &r.queue_sort,
            Point::PreFilter => &r.pre_filter,
            Point::Filter => &r.filter,
            Point::PostFilter => &r.post_filter,
            Point::PreScore => &r.pre_score,
            Point::Score => &r.score,
            Point::Reserve => &r.reserve,
            Point::Permit => &r.permit,
            Point::PreBind => &r.pre_bind,
            Point::Bind => &r.bind,
            Point::PostBind => &r.post_bind,
            Point::PlacementGenerate => &r.placement_generate,
            Point::PlacementScore => &r.placement_score,
            Point::PodGroupPostFilter => &r.pod_group_post_filter,
        };
        s.as_ref().unwrap_or(&empty)
    };
    let multi = raw.and_then(|r| r.multi_point.as_ref());
    if multi.is_some() && !multi_point {
        errs.push(
            format!("{path}.plugins.multiPoint"),
            format!("not a field of {GROUP}/{version}"),
        );
    }

    let weight_of =
        |w: Option<i64>, field: &str, errs_weight: &mut Vec<(String, String)>| -> Option<i32> {
            match w {
                None => None,
                Some(w) if w <= 0 => {
                    errs_weight.push((
                        field.to_string(),
                        format!("score plugin weight must be positive, got {w}"),
                    ));
                    None
                }
                Some(w) if w > 100 => {
                    errs_weight.push((
                        field.to_string(),
                        format!("score plugin weight must not exceed 100, got {w}"),
                    ));
                    None
                }
                Some(w) => Some(w as i32),
            }
        };
    let mut weight_errs: Vec<(String, String)> = Vec::new();

    // multiPoint (v1/v1beta3): the default multiPoint set merged with the user's.
    let gated: &[(&str, i32)] = if topology_aware {
        catalog::TOPOLOGY_AWARE_MULTI_POINT
    } else {
        &[]
    };
    let mut mp: Vec<(String, i32)> = if multi_point {
        catalog::V1_MULTI_POINT
            .iter()
            .chain(gated)
            .filter(|(n, _)| catalog::is_known(n))
            .map(|(n, w)| (n.to_string(), *w))
            .collect()
    } else {
        Vec::new()
    };
    if multi_point {
        for (n, _) in catalog::V1_MULTI_POINT
            .iter()
            .filter(|(n, _)| !catalog::is_known(n))
        {
            warnings.push(format!(
                "default plugin {n} is not implemented by mcsched yet; left out"
            ));
        }
    }
    let mut mp_disabled_all = false;
    if let Some(m) = multi {
        for (j, d) in m.disabled.iter().flatten().enumerate() {
            let field = format!("{path}.plugins.multiPoint.disabled[{j}].name");
            if d.name == "*" {
                mp_disabled_all = true;
                mp.clear();
            } else if let Some(n) =
                check_disabled(&d.name, &field, errs, &mut warnings, &mut fit_strategy)
            {
                mp.retain(|(x, _)| *x != n);
            }
        }
        for (j, e) in m.enabled.iter().flatten().enumerate() {
            let field = format!("{path}.plugins.multiPoint.enabled[{j}]");
            if let Some(n) = check_name(
                &e.name,
                &format!("{field}.name"),
                None,
                errs,
                &mut warnings,
                &mut fit_strategy,
            ) {
                let w = weight_of(e.weight, &format!("{field}.weight"), &mut weight_errs);
                match mp.iter_mut().find(|(x, _)| *x == n) {
                    Some(slot) => slot.1 = w.unwrap_or(slot.1),
                    None => mp.push((n, w.unwrap_or(0))),
                }
            }
        }
    }
    let _ = mp_disabled_all;

    let mut plugins = Plugins::default();
    for point in Point::ALL {
        let set = set_of(point);
        let field = format!("{path}.plugins.{}", point.field());
        // The older versions cannot name the pod group cycle's points: they get v1's
        // defaults there, so that their gangs are placed and preempt for as v1's are.
        if point.v1_only() && version != "v1" {
            if set.enabled.is_some() || set.disabled.is_some() {
                errs.push(field, format!("not a field of {GROUP}/{version}"));
            }
            *plugins.get_mut(point) = (catalog::V1_MULTI_POINT.iter().chain(gated))
                .filter(|(n, _)| catalog::implements(n, point))
                .map(|(n, w)| PluginRef {
                    name: n.to_string(),
                    weight: if point.weighted() { (*w).max(1) } else { 0 },
                })
                .collect();
            continue;
        }
        let mut list: Vec<(String, i32)> = if multi_point {
            mp.iter()
                .filter(|(n, _)| catalog::implements(n, point))
                .cloned()
                .collect()
        } else {
            defaults_for(version, false, point)
        };
        let mut disabled: HashSet<String> = HashSet::new();
        for (j, d) in set.disabled.iter().flatten().enumerate() {
            if d.name == "*" {
                list.clear();
            } else if let Some(n) = check_disabled(
                &d.name,
                &format!("{field}.disabled[{j}].name"),
                errs,
                &mut warnings,
                &mut fit_strategy,
            ) {
                disabled.insert(n);
            }
        }
        list.retain(|(n, _)| !disabled.contains(n));
        // Plugins enabled at this point come first in kube's multiPoint expansion; in the
        // older versions they keep a default's place or are appended.
        let mut explicit: Vec<(String, i32)> = Vec::new();
        for (j, e) in set.enabled.iter().flatten().enumerate() {
            let f = format!("{field}.enabled[{j}]");
            if let Some(n) = check_name(
                &e.name,
                &format!("{f}.name"),
                Some(point),
                errs,
                &mut warnings,
                &mut fit_strategy,
            ) {
                let w = if point.weighted() {
                    weight_of(e.weight, &format!("{f}.weight"), &mut weight_errs)
                } else {
                    None
                };
                if explicit.iter().any(|(x, _)| *x == n) {
                    errs.push(
                        format!("{f}.name"),
                        format!("plugin {n:?} is enabled twice"),
                    );
                    continue;
                }
                explicit.push((n, w.unwrap_or(0)));
            }
        }
        let merged: Vec<(String, i32)> = if multi_point {
            let mut m = explicit.clone();
            for (n, w) in list {
                if !m.iter().any(|(x, _)| *x == n) {
                    m.push((n, w));
                }
            }
            m
        } else {
            let mut m = list;
            for (n, w) in explicit {
                match m.iter_mut().find(|(x, _)| *x == n) {
                    Some(slot) => {
                        if w > 0 {
                            slot.1 = w;
                        }
                    }
                    None => m.push((n, w)),
                }
            }
            m
        };
        *plugins.get_mut(point) = merged
            .into_iter()
            .map(|(name, weight)| PluginRef {
                name,
                weight: if point.weighted() { weight.max(1) } else { 0 },
            })
            .collect();
    }
    for name in catalog::ALWAYS_ON {
        for &point in catalog::points_of(name).unwrap_or_default() {
            let list = plugins.get_mut(point);
            if !list.iter().any(|r| r.name == *name) {
                let weight = if point == Point::Score {
                    let others = list.iter().map(|r| i64::from(r.weight)).sum();
                    i32::try_from(catalog::always_on_score_weight(others)).unwrap_or(i32::MAX)
                } else {
                    0
                };
                list.push(PluginRef {
                    name: name.to_string(),
                    weight,
                });
            }
        }
    }
    for (f, m) in weight_errs {
        errs.push(f, m);
    }
    (plugins, warnings, fit_strategy)
}

/// A disabled name: any plugin kube-scheduler knows may be disabled, implemented or not.
fn check_disabled(
    name: &str,
    field: &str,
    errs: &mut ConfigErrors,
    warnings: &mut Vec<String>,
    fit_strategy: &mut Option<ScoringStrategyType>,
) -> Option<String> {
    if catalog::NOT_YET_IMPLEMENTED.contains(&name) {
        return Some(name.to_string());
    }
    check_name(name, field, None, errs, warnings, fit_strategy)
}

/// Checks a plugin name; returns the name to use (legacy names mapped), or None.
fn check_name(
    name: &str,
    field: &str,
    point: Option<Point>,
    errs: &mut ConfigErrors,
    warnings: &mut Vec<String>,
    fit_strategy: &mut Option<ScoringStrategyType>,
) -> Option<String> {
    if name == "*" {
        return None;
    }
    let mapped = match catalog::legacy(name) {
        Some(Legacy::Renamed(to)) => {
            warnings.push(format!("{field}: {name} is now {to}"));
            to.to_string()
        }
        Some(Legacy::FitStrategy(s)) => {
            warnings.push(format!(
                "{field}: {name} is now NodeResourcesFit with scoringStrategy {s}"
            ));
            *fit_strategy = Some(match s {
                "MostAllocated" => ScoringStrategyType::MostAllocated,
                "RequestedToCapacityRatio" => ScoringStrategyType::RequestedToCapacityRatio,
                _ => ScoringStrategyType::LeastAllocated,
            });
            "NodeResourcesFit".to_string()
        }
        Some(Legacy::Removed) => {
            warnings.push(format!(
                "{field}: {name} was removed from kube-scheduler; ignored"
            ));
            return None;
        }
        None => name.to_string(),
    };
    if !catalog::is_known(&mapped) {
        if catalog::NOT_YET_IMPLEMENTED.contains(&mapped.as_str()) {
            errs.push(
                field,
                format!("plugin {mapped:?} is not implemented by mcsched yet"),
            );
        } else {
            errs.push(field, format!("unknown plugin {mapped:?}"));
        }
        return None;
    }
    if let Some(p) = point
        && !catalog::implements(&mapped, p)
    {
        errs.push(
            field,
            format!(
                "plugin {mapped:?} does not implement the {} extension point",
                p.field()
            ),
        );
        return None;
    }
    Some(mapped)
}

fn extender(re: &RawExtender, path: &str, errs: &mut ConfigErrors) -> Option<Extender> {
    let url_prefix = re.url_prefix.clone().unwrap_or_default();
    if url_prefix.is_empty() {
        errs.push(format!("{path}.urlPrefix"), "Required value");
    }
    let weight = re.weight.unwrap_or(0);
    let prioritize_verb = re.prioritize_verb.clone().filter(|v| !v.is_empty());
    if prioritize_verb.is_some() && weight <= 0 {
        errs.push(
            format!("{path}.weight"),
            format!("must have a positive weight applied to it, got {weight}"),
        );
    }
    let http_timeout = match &re.http_timeout {
        Some(t) => match duration::parse(t) {
            Ok(d) => d,
            Err(e) => {
                errs.push(format!("{path}.httpTimeout"), e.to_string());
                Duration::from_secs(5)
            }
        },
        None => Duration::from_secs(5),
    };
    let mut seen = HashSet::new();
    let mut managed = Vec::new();
    for (j, m) in re.managed_resources.iter().flatten().enumerate() {
        if !seen.insert(m.name.clone()) {
            errs.push(
                format!("{path}.managedResources[{j}].name"),
                format!("duplicate extender managed resource name {:?}", m.name),
            );
        }
        managed.push((m.name.clone(), m.ignored_by_scheduler.unwrap_or(false)));
    }
    let tls_config = re.tls_config.as_ref().map(|t| ExtenderTls {
        insecure: t.insecure.unwrap_or(false),
        server_name: t.server_name.clone(),
        cert_file: t.cert_file.clone(),
        key_file: t.key_file.clone(),
        ca_file: t.ca_file.clone(),
        cert_data: t.cert_data.as_ref().map(|d| d.0.clone()),
        key_data: t.key_data.as_ref().map(|d| d.0.clone()),
        ca_data: t.ca_data.as_ref().map(|d| d.0.clone()),
    });
    Some(Extender {
        url_prefix,
        filter_verb: re.filter_verb.clone().filter(|v| !v.is_empty()),
        preempt_verb: re.preempt_verb.clone().filter(|v| !v.is_empty()),
        prioritize_verb,
        bind_verb: re.bind_verb.clone().filter(|v| !v.is_empty()),
        weight,
        enable_https: re.enable_https.unwrap_or(false),
        tls_config,
        http_timeout,
        node_cache_capable: re.node_cache_capable.unwrap_or(false),
        managed_resources: managed,
        ignorable: re.ignorable.unwrap_or(false),
    })
}

/// The media types the API server serves built-in kinds in; None for an empty value.
fn supported_media_type(t: &str) -> Result<Option<&'static str>, String> {
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    const JSON: &str = "application/json";
    match t.trim() {
        "" => Ok(None),
        PROTOBUF => Ok(Some(PROTOBUF)),
        JSON => Ok(Some(JSON)),
        other => Err(format!(
            "Unsupported value: {other:?}: supported values: \"{PROTOBUF}\", \"{JSON}\""
        )),
    }
}
