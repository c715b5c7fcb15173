//! Pod Security admission as a leaf enforces it on a copy: the namespace's
//! `pod-security.kubernetes.io/enforce` level and version, and the Pod Security Standards
//! checks of that level, after k8s.io/pod-security-admission v0.37 (`api/helpers.go`,
//! `policy/check_*.go`, `policy/registry.go`): the same checks per version, in the same
//! order, with the same forbidden reasons and details, so that a refusal reads as the
//! leaf's own would.
//!
//! What cannot be known from here is not guessed in the pod's favour: a namespace without
//! an `enforce` label gets the leaf's default, taken as `privileged` (the API server's
//! own default, when its admission configuration sets none); exemptions configured in
//! the leaf's admission configuration (namespaces, users, runtime classes) are not known,
//! so a copy an exemption would let in is refused here.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EphemeralContainer, Lifecycle, LifecycleHandler, PodSpec, Probe,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub(crate) use mcsched_shared::keys::{
    POD_SECURITY_ENFORCE_LABEL as ENFORCE_LABEL,
    POD_SECURITY_ENFORCE_VERSION_LABEL as ENFORCE_VERSION_LABEL,
};

/// The newest policy version whose checks are here: `latest` on a leaf of this version
/// or newer (newer ones only allow more sysctls, so judging them by these refuses more,
/// never less).
pub(crate) const NEWEST_MINOR: u32 = 37;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// As PSA's `ParseLevel`: anything but the three names is `restricted`.
    fn parse(s: &str) -> Level {
        match s {
            "privileged" => Level::Privileged,
            "baseline" => Level::Baseline,
            _ => Level::Restricted,
        }
    }
}

/// A policy version: `latest`, or `v1.<minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Version {
    Latest,
    Minor(u32),
}

impl Version {
    /// As PSA's `ParseVersion`: anything but `latest` or `v1.<n>` is `latest`.
    fn parse(s: &str) -> Version {
        let minor = s
            .strip_prefix("v1.")
            .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
            .filter(|m| *m == "0" || !m.starts_with('0'))
            .and_then(|m| m.parse().ok());
        match minor {
            Some(m) => Version::Minor(m),
            None => Version::Latest,
        }
    }

    /// The checks' version: `latest` is the leaf's own version (PSA's evaluator stops at
    /// the version of its binary), and no version is newer than the leaf's or than
    /// [`NEWEST_MINOR`].
    fn effective(self, leaf_minor: Option<u32>) -> u32 {
        let newest = leaf_minor.map_or(NEWEST_MINOR, |m| m.min(NEWEST_MINOR));
        match self {
            Version::Latest => newest,
            Version::Minor(m) => m.min(newest),
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

/// A namespace's enforced level and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Enforce {
    pub(crate) level: Level,
    pub(crate) version: Version,
}

impl Default for Enforce {
    /// The leaf's default for a namespace without labels, assumed `privileged:latest`.
    fn default() -> Self {
        Enforce {
            level: Level::Privileged,
            version: Version::Latest,
        }
    }
}

impl std::fmt::Display for Enforce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

impl Enforce {
    /// As PSA's `PolicyToEvaluate`: the labels over the default; an unknown level is
    /// `restricted`, an unknown version `latest`.
    pub(crate) fn from_labels(labels: Option<&BTreeMap<String, String>>) -> Enforce {
        let mut e = Enforce::default();
        let Some(labels) = labels else {
            return e;
        };
        if let Some(l) = labels.get(ENFORCE_LABEL) {
            e.level = Level::parse(l);
        }
        if let Some(v) = labels.get(ENFORCE_VERSION_LABEL) {
            e.version = Version::parse(v);
        }
        e
    }

    /// Why the leaf would refuse a pod of `meta` and `spec` in a namespace of this
    /// policy, as PSA words it (`privileged (container "app" must not set
    /// securityContext.privileged=true), hostPath volumes (volume "root")`); None when
    /// it is allowed. `leaf_minor`: the leaf's Kubernetes minor version, when known.
    pub(crate) fn refusal(
        &self,
        meta: &ObjectMeta,
        spec: &PodSpec,
        leaf_minor: Option<u32>,
    ) -> Option<String> {
        let found = evaluate(self.level, self.version.effective(leaf_minor), meta, spec);
        (!found.is_empty()).then(|| {
            found
                .iter()
                .map(|f| {
                    if f.detail.is_empty() {
                        f.reason.clone()
                    } else {
                        format!("{} ({})", f.reason, f.detail)
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
    }
}

/// One failed check: PSA's ForbiddenReason and ForbiddenDetail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forbidden {
    pub(crate) reason: String,
    pub(crate) detail: String,
}

fn forbid(reason: impl Into<String>, detail: impl Into<String>) -> Option<Forbidden> {
    Some(Forbidden {
        reason: reason.into(),
        detail: detail.into(),
    })
}

type CheckFn = fn(&ObjectMeta, &PodSpec) -> Option<Forbidden>;

/// One version of a check: from `since` (a minor of 1.x) on, until the next.
struct Versioned {
    since: u32,
    check: CheckFn,
    /// Baseline checks this restricted one replaces.
    overrides: &'static [&'static str],
}

struct Check {
    id: &'static str,
    level: Level,
    versions: &'static [Versioned],
}

const fn v(since: u32, check: CheckFn) -> Versioned {
    Versioned {
        since,
        check,
        overrides: &[],
    }
}

const fn v_over(since: u32, check: CheckFn, overrides: &'static [&'static str]) -> Versioned {
    Versioned {
        since,
        check,
        overrides,
    }
}

/// PSA's default checks, by ID (PSA runs them in the byte order of their IDs, baseline
/// ones first: see [`evaluate`]).
const CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        versions: &[v(0, app_armor_profile)],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        versions: &[v(0, capabilities_baseline)],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        versions: &[v(0, host_namespaces)],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        versions: &[v(0, host_path_volumes)],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        versions: &[v(0, host_ports)],
    },
    Check {
        id: "hostProbesAndHostLifecycle",
        level: Level::Baseline,
        versions: &[v(34, host_probes_and_lifecycle)],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        versions: &[v(0, privileged)],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        versions: &[v(0, proc_mount), v(35, proc_mount_unless_user_namespace)],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        versions: &[v(0, se_linux_options_1_0), v(31, se_linux_options_1_31)],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        versions: &[v(0, seccomp_annotations), v(19, seccomp_profile_baseline)],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        versions: &[
            v(0, sysctls_1_0),
            v(27, sysctls_1_27),
            v(29, sysctls_1_29),
            v(32, sysctls_1_32),
            v(37, sysctls_1_37),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        versions: &[v(0, windows_host_process)],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        versions: &[
            v(8, allow_privilege_escalation),
            v(25, allow_privilege_escalation_1_25),
        ],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        versions: &[
            v_over(22, capabilities_restricted, &["capabilities_baseline"]),
            v_over(25, capabilities_restricted_1_25, &["capabilities_baseline"]),
        ],
    },
    Check {
        id: "procMount_restricted",
        level: Level::Restricted,
        versions: &[v_over(35, proc_mount, &["procMount"])],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        versions: &[v_over(0, restricted_volumes, &["hostPathVolumes"])],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        versions: &[v(0, run_as_non_root), v(35, run_as_non_root_1_35)],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        versions: &[v(23, run_as_user), v(35, run_as_user_1_35)],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        versions: &[
            v_over(19, seccomp_profile_restricted, &["seccompProfile_baseline"]),
            v_over(
                25,
                seccomp_profile_restricted_1_25,
                &["seccompProfile_baseline"],
            ),
        ],
    },
];

/// The version of `check` in force at `minor`, if any.
fn at(check: &Check, minor: u32) -> Option<&Versioned> {
    check.versions.iter().rev().find(|v| v.since <= minor)
}

/// The checks of `level` at version 1.`minor` that `meta` and `spec` fail, in PSA's
/// order (baseline checks by ID, then restricted ones by ID; a restricted check
/// replaces the baseline checks it overrides).
pub(crate) fn evaluate(
    level: Level,
    minor: u32,
    meta: &ObjectMeta,
    spec: &PodSpec,
) -> Vec<Forbidden> {
    evaluate_checks(level, minor, meta, spec)
        .into_iter()
        .map(|(_, f)| f)
        .collect()
}

/// [`evaluate`] with the ID of the check each refusal comes from (the reasons do not
/// always name it: upstream's fixtures are named by ID).
pub(crate) fn evaluate_checks(
    level: Level,
    minor: u32,
    meta: &ObjectMeta,
    spec: &PodSpec,
) -> Vec<(&'static str, Forbidden)> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let mut active: Vec<(&Check, &Versioned)> = CHECKS
        .iter()
        .filter(|c| c.level == Level::Baseline || level == Level::Restricted)
        .filter_map(|c| at(c, minor).map(|v| (c, v)))
        .collect();
    let overridden: BTreeSet<&str> = active
        .iter()
        .flat_map(|(_, v)| v.overrides.iter().copied())
        .collect();
    active.retain(|(c, _)| c.level == Level::Restricted || !overridden.contains(c.id));
    // Byte order, as Go's: "seLinuxOptions" before "seccompProfile_baseline".
    active.sort_by_key(|(c, _)| (c.level, c.id));
    active
        .into_iter()
        .filter_map(|(c, v)| (v.check)(meta, spec).map(|f| (c.id, f)))
        .collect()
}

// Helpers, as PSA's.

/// A container of any kind, as PSA's visitor sees it.
struct C<'a> {
    name: &'a str,
    sc: Option<&'a SecurityContext>,
    ports: &'a [ContainerPort],
    probes: [Option<&'a Probe>; 3],
    lifecycle: Option<&'a Lifecycle>,
}

impl<'a> From<&'a Container> for C<'a> {
    fn from(c: &'a Container) -> Self {
        C {
            name: &c.name,
            sc: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or_default(),
            probes: [
                c.liveness_probe.as_ref(),
                c.readiness_probe.as_ref(),
                c.startup_probe.as_ref(),
            ],
            lifecycle: c.lifecycle.as_ref(),
        }
    }
}

impl<'a> From<&'a EphemeralContainer> for C<'a> {
    fn from(c: &'a EphemeralContainer) -> Self {
        C {
            name: &c.name,
            sc: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or_default(),
            probes: [
                c.liveness_probe.as_ref(),
                c.readiness_probe.as_ref(),
                c.startup_probe.as_ref(),
            ],
            lifecycle: c.lifecycle.as_ref(),
        }
    }
}

/// Init containers, containers, then ephemeral containers: PSA's `visitContainers`.
fn containers(spec: &PodSpec) -> impl Iterator<Item = C<'_>> {
    spec.init_containers
        .iter()
        .flatten()
        .map(C::from)
        .chain(spec.containers.iter().map(C::from))
        .chain(spec.ephemeral_containers.iter().flatten().map(C::from))
}

/// `"a", "b"`: PSA's `joinQuote` (no escaping, as there).
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

fn pluralize(singular: &'static str, plural: &'static str, n: usize) -> &'static str {
    if n == 1 { singular } else { plural }
}

/// `container "a"` / `containers "a", "b"`.
fn containers_named<S: AsRef<str>>(names: &[S]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Go's `%q` of a string, for the annotations PSA quotes so.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `pod and containers "a"`: who set a forbidden value.
fn setters(pod: bool, containers: &[&str]) -> Vec<String> {
    let mut s = Vec::new();
    if pod {
        s.push("pod".to_string());
    }
    if !containers.is_empty() {
        s.push(containers_named(containers));
    }
    s
}

/// `hostUsers: false`: the pod runs in a user namespace.
fn in_user_namespace(spec: &PodSpec) -> bool {
    spec.host_users == Some(false)
}

fn is_windows(spec: &PodSpec) -> bool {
    spec.os.as_ref().is_some_and(|os| os.name == "windows")
}

// Baseline checks.

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// appArmorProfile (1.0+): RuntimeDefault or Localhost only, in fields and annotations.
fn app_armor_profile(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let allowed = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut bad_values = BTreeSet::new();
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
        .filter(|p| !allowed(&p.type_))
        .map(|p| bad_values.insert(p.type_.clone()))
        .is_some();
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = c.sc.and_then(|s| s.app_armor_profile.as_ref())
            && !allowed(&p.type_)
        {
            bad.push(c.name);
            bad_values.insert(p.type_.clone());
        }
    }
    let mut setters = setters(pod, &bad);
    let mut values: Vec<String> = bad_values.into_iter().collect();
    let mut annotations: Vec<String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, v)| {
            k.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect();
    if !annotations.is_empty() {
        annotations.sort();
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        values.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    forbid(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added<'a>(c: &C<'a>) -> &'a [String] {
    c.sc.and_then(|s| s.capabilities.as_ref())
        .and_then(|caps| caps.add.as_deref())
        .unwrap_or_default()
}

/// capabilities_baseline (1.0+): nothing added beyond the container runtime's defaults.
fn capabilities_baseline(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for cap in added(&c) {
            if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
                valid = false;
                caps.insert(cap.as_str());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<&str> = caps.into_iter().collect();
    forbid(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&bad),
            join_quote(&caps)
        ),
    )
}

/// hostNamespaces (1.0+): no hostNetwork, hostPID or hostIPC.
fn host_namespaces(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let set: Vec<&str> = [
        (spec.host_network, "hostNetwork=true"),
        (spec.host_pid, "hostPID=true"),
        (spec.host_ipc, "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(on, _)| *on == Some(true))
    .map(|(_, s)| s)
    .collect();
    if set.is_empty() {
        return None;
    }
    forbid("host namespaces", set.join(", "))
}

/// hostPathVolumes (1.0+): no hostPath volume.
fn host_path_volumes(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let names: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.is_some())
        .map(|v| v.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    forbid(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

/// hostPorts (1.0+): no container port bound on the node.
fn host_ports(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    // A set of strings, listed in string order, as Go's sets.String.
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c.ports {
            if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    forbid(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_named(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

/// hostProbesAndHostLifecycle (1.34+): probes and lifecycle handlers reach the pod
/// itself, not another host.
fn host_probes_and_lifecycle(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let probe_hosts = |p: &Probe| -> Vec<String> {
        [
            p.http_get.as_ref().and_then(|h| h.host.clone()),
            p.tcp_socket.as_ref().and_then(|t| t.host.clone()),
        ]
        .into_iter()
        .flatten()
        .filter(|h| !h.is_empty())
        .collect()
    };
    let handler_hosts = |h: &LifecycleHandler| -> Vec<String> {
        [
            h.http_get.as_ref().and_then(|g| g.host.clone()),
            h.tcp_socket.as_ref().and_then(|t| t.host.clone()),
        ]
        .into_iter()
        .flatten()
        .filter(|h| !h.is_empty())
        .collect()
    };
    for c in containers(spec) {
        let mut found: Vec<String> = c
            .probes
            .iter()
            .flatten()
            .flat_map(|p| probe_hosts(p))
            .collect();
        if let Some(l) = c.lifecycle {
            found.extend(
                [l.post_start.as_ref(), l.pre_stop.as_ref()]
                    .into_iter()
                    .flatten()
                    .flat_map(handler_hosts),
            );
        }
        if !found.is_empty() {
            bad.insert(c.name);
            hosts.extend(found);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let bad: Vec<&str> = bad.into_iter().collect();
    let hosts: Vec<String> = hosts.into_iter().collect();
    forbid(
        "probe or lifecycle host",
        format!(
            "{} {} {} {}",
            containers_named(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            join_quote(&hosts)
        ),
    )
}

/// privileged (1.0+): no privileged container.
fn privileged(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let bad: Vec<&str> = containers(spec)
        .filter(|c| c.sc.and_then(|s| s.privileged) == Some(true))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbid(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_named(&bad)
        ),
    )
}

/// procMount (1.0+; restricted's procMount_restricted from 1.35): the default /proc
/// mount only.
fn proc_mount(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(t) = c.sc.and_then(|s| s.proc_mount.as_deref())
            && t != "Default"
        {
            bad.push(c.name);
            types.insert(t);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    forbid(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_named(&bad),
            join_quote(&types)
        ),
    )
}

/// procMount (1.35+): any /proc mount in a user namespace.
fn proc_mount_unless_user_namespace(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if in_user_namespace(spec) {
        return None;
    }
    proc_mount(meta, spec)
}

fn se_linux_options_1_0(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    se_linux_options(
        spec,
        &["", "container_t", "container_init_t", "container_kvm_t"],
    )
}

fn se_linux_options_1_31(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    se_linux_options(
        spec,
        &[
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ],
    )
}

/// seLinuxOptions (1.0+; container_engine_t from 1.31): an allowed type, no user, no role.
fn se_linux_options(spec: &PodSpec, allowed: &[&str]) -> Option<Forbidden> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |o: &k8s_openapi::api::core::v1::SELinuxOptions| {
        let mut ok = true;
        let t = o.type_.as_deref().unwrap_or_default();
        if !allowed.contains(&t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if o.user.as_deref().is_some_and(|u| !u.is_empty()) {
            ok = false;
            set_user = true;
        }
        if o.role.as_deref().is_some_and(|r| !r.is_empty()) {
            ok = false;
            set_role = true;
        }
        ok
    };
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|s| s.se_linux_options.as_ref())
        .is_some_and(|o| !valid(o));
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(o) = c.sc.and_then(|s| s.se_linux_options.as_ref())
            && !valid(o)
        {
            bad.push(c.name);
        }
    }
    let setters = setters(pod, &bad);
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    forbid(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// seccompProfile_baseline (1.0 to 1.18): the alpha annotations name no unconfined
/// profile.
fn seccomp_annotations(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let annotations = meta.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k));
    let mut forbidden = BTreeSet::new();
    if let Some(v) = get(SECCOMP_POD_ANNOTATION)
        && !valid(v)
    {
        forbidden.insert(format!("{SECCOMP_POD_ANNOTATION}={}", go_quote(v)));
    }
    for c in containers(spec) {
        let key = format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", c.name);
        if let Some(v) = get(&key)
            && !valid(v)
        {
            forbidden.insert(format!("{key}={}", go_quote(v)));
        }
    }
    if forbidden.is_empty() {
        return None;
    }
    let list: Vec<String> = forbidden.into_iter().collect();
    forbid(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", list.len()),
            list.join(", ")
        ),
    )
}

fn valid_seccomp(t: &str) -> bool {
    matches!(t, "RuntimeDefault" | "Localhost")
}

/// seccompProfile_baseline (1.19+): no Unconfined profile, where one is set.
fn seccomp_profile_baseline(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad_values = BTreeSet::new();
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .filter(|p| !valid_seccomp(&p.type_))
        .map(|p| bad_values.insert(p.type_.clone()))
        .is_some();
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = c.sc.and_then(|s| s.seccomp_profile.as_ref())
            && !valid_seccomp(&p.type_)
        {
            bad.push(c.name);
            bad_values.insert(p.type_.clone());
        }
    }
    let setters = setters(pod, &bad);
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = bad_values.into_iter().collect();
    forbid(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];
const SYSCTLS_1_37: &[&str] = &[
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
];

fn sysctls_1_0(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    sysctls(spec, &[SYSCTLS_1_0])
}

fn sysctls_1_27(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27])
}

fn sysctls_1_29(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29])
}

fn sysctls_1_32(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    sysctls(
        spec,
        &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29, SYSCTLS_1_32],
    )
}

fn sysctls_1_37(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    sysctls(
        spec,
        &[
            SYSCTLS_1_0,
            SYSCTLS_1_27,
            SYSCTLS_1_29,
            SYSCTLS_1_32,
            SYSCTLS_1_37,
        ],
    )
}

/// sysctls (1.0+, more allowed from 1.27, 1.29, 1.32 and 1.37): the namespaced, isolated
/// ones.
fn sysctls(spec: &PodSpec, allowed: &[&[&str]]) -> Option<Forbidden> {
    let bad: Vec<&str> = spec
        .security_context
        .as_ref()
        .and_then(|s| s.sysctls.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|s| s.name.as_str())
        .filter(|n| !allowed.iter().any(|set| set.contains(n)))
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbid("forbidden sysctls", bad.join(", "))
}

/// windowsHostProcess (1.0+): no Windows HostProcess pod or container.
fn windows_host_process(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|s| s.windows_options.as_ref())
        .and_then(|w| w.host_process)
        == Some(true);
    let bad: Vec<&str> = containers(spec)
        .filter(|c| {
            c.sc.and_then(|s| s.windows_options.as_ref())
                .and_then(|w| w.host_process)
                == Some(true)
        })
        .map(|c| c.name)
        .collect();
    let setters = setters(pod, &bad);
    if setters.is_empty() {
        return None;
    }
    forbid(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

// Restricted checks.

/// From 1.25 a Windows pod (`spec.os.name: windows`) passes the restricted checks of
/// fields the API refuses on one.
fn allow_privilege_escalation_1_25(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if is_windows(spec) {
        return None;
    }
    allow_privilege_escalation(meta, spec)
}

fn capabilities_restricted_1_25(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if is_windows(spec) {
        return None;
    }
    capabilities_restricted(meta, spec)
}

fn seccomp_profile_restricted_1_25(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if is_windows(spec) {
        return None;
    }
    seccomp_profile_restricted(meta, spec)
}

/// allowPrivilegeEscalation (1.8+): every container sets it false.
fn allow_privilege_escalation(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let bad: Vec<&str> = containers(spec)
        .filter(|c| c.sc.and_then(|s| s.allow_privilege_escalation) != Some(false))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbid(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_named(&bad)
        ),
    )
}

/// capabilities_restricted (1.22+): drop ALL, add NET_BIND_SERVICE at most.
fn capabilities_restricted(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let Some(k) = c.sc.and_then(|s| s.capabilities.as_ref()) else {
            missing_drop.push(c.name);
            continue;
        };
        if !k.drop.iter().flatten().any(|d| d == "ALL") {
            missing_drop.push(c.name);
        }
        let mut forbidden = false;
        for a in k.add.iter().flatten() {
            if a != "NET_BIND_SERVICE" {
                forbidden = true;
                caps.insert(a.as_str());
            }
        }
        if forbidden {
            adding.push(c.name);
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_named(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let caps: Vec<&str> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    forbid("unrestricted capabilities", details.join("; "))
}

/// restrictedVolumes (1.0+): only the volume types that give no access to the node or
/// to storage outside the cluster's claims.
fn restricted_volumes(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        if v.config_map.is_some()
            || v.csi.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
            || v.ephemeral.is_some()
            || v.image.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.secret.is_some()
        {
            continue;
        }
        let kind = [
            (v.host_path.is_some(), "hostPath"),
            (v.gce_persistent_disk.is_some(), "gcePersistentDisk"),
            (v.aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
            (v.git_repo.is_some(), "gitRepo"),
            (v.nfs.is_some(), "nfs"),
            (v.iscsi.is_some(), "iscsi"),
            (v.glusterfs.is_some(), "glusterfs"),
            (v.rbd.is_some(), "rbd"),
            (v.flex_volume.is_some(), "flexVolume"),
            (v.cinder.is_some(), "cinder"),
            (v.cephfs.is_some(), "cephfs"),
            (v.flocker.is_some(), "flocker"),
            (v.fc.is_some(), "fc"),
            (v.azure_file.is_some(), "azureFile"),
            (v.vsphere_volume.is_some(), "vsphereVolume"),
            (v.quobyte.is_some(), "quobyte"),
            (v.azure_disk.is_some(), "azureDisk"),
            (v.photon_persistent_disk.is_some(), "photonPersistentDisk"),
            (v.portworx_volume.is_some(), "portworxVolume"),
            (v.scale_io.is_some(), "scaleIO"),
            (v.storageos.is_some(), "storageos"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name));
        // Every source the API knows is listed above or among the allowed ones, so a
        // volume with none of them has no source at all: the API server defaults it to
        // an emptyDir (`SetDefaults_Volume`) before admission, and PSA allows it. (PSA's
        // "unknown" type is for sources newer than its list; none reach this struct.)
        let Some(kind) = kind else {
            continue;
        };
        bad.push(v.name.as_str());
        types.insert(kind);
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    forbid(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

/// runAsNonRoot (1.0+): true on the pod, or on every container that does not inherit it.
fn run_as_non_root(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut pod_bad = false;
    let mut pod_non_root = false;
    if let Some(v) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_non_root)
    {
        if v {
            pod_non_root = true;
        } else {
            pod_bad = true;
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match c.sc.and_then(|s| s.run_as_non_root) {
            Some(false) => explicit.push(c.name),
            Some(true) => {}
            None if !pod_non_root => implicit.push(c.name),
            None => {}
        }
    }
    let setters = setters(pod_bad, &explicit);
    if !setters.is_empty() {
        return forbid(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if !implicit.is_empty() {
        return forbid(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_named(&implicit)
            ),
        );
    }
    None
}

/// runAsNonRoot (1.35+): a pod in a user namespace is not root on the node.
fn run_as_non_root_1_35(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if in_user_namespace(spec) {
        return None;
    }
    run_as_non_root(meta, spec)
}

/// runAsUser (1.23+): never user 0.
fn run_as_user(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let pod = spec.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0);
    let bad: Vec<&str> = containers(spec)
        .filter(|c| c.sc.and_then(|s| s.run_as_user) == Some(0))
        .map(|c| c.name)
        .collect();
    let setters = setters(pod, &bad);
    if setters.is_empty() {
        return None;
    }
    forbid(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

/// runAsUser (1.35+): user 0 in a user namespace is not root on the node.
fn run_as_user_1_35(meta: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    if in_user_namespace(spec) {
        return None;
    }
    run_as_user(meta, spec)
}

/// seccompProfile_restricted (1.19+): RuntimeDefault or Localhost, on the pod or on
/// every container.
fn seccomp_profile_restricted(_: &ObjectMeta, spec: &PodSpec) -> Option<Forbidden> {
    let mut bad_values = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
    {
        if valid_seccomp(&p.type_) {
            pod_set = true;
        } else {
            pod_bad = true;
            bad_values.insert(p.type_.clone());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match c.sc.and_then(|s| s.seccomp_profile.as_ref()) {
            Some(p) if !valid_seccomp(&p.type_) => {
                explicit.push(c.name);
                bad_values.insert(p.type_.clone());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(c.name),
            None => {}
        }
    }
    let setters = setters(pod_bad, &explicit);
    if !setters.is_empty() {
        let values: Vec<String> = bad_values.into_iter().collect();
        return forbid(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if !implicit.is_empty() {
        return forbid(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_named(&implicit)
            ),
        );
    }
    None
}

#[cfg(test)]
#[path = "pod_security_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "pod_security_fixtures.rs"]
mod fixtures;
