//! One test per Pod Security check, with PSA's reasons and details word for word, then
//! the level and version a namespace's labels give and the order PSA reports in.

use super::*;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).expect("a pod")
}

/// A pod of containers `c` (the JSON of each) and the rest of its spec.
fn with(containers: Value, rest: Value) -> Pod {
    let mut spec = json!({"containers": containers});
    if let (Some(s), Some(r)) = (spec.as_object_mut(), rest.as_object()) {
        s.extend(r.clone());
    }
    pod(json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": spec}))
}

fn run(check: CheckFn, p: &Pod) -> Option<(String, String)> {
    let spec = p.spec.clone().unwrap_or_default();
    check(&p.metadata, &spec).map(|f| (f.reason, f.detail))
}

fn found(reason: &str, detail: &str) -> Option<(String, String)> {
    Some((reason.to_string(), detail.to_string()))
}

fn at(level: Level, minor: u32, p: &Pod) -> Vec<String> {
    let spec = p.spec.clone().unwrap_or_default();
    evaluate(level, minor, &p.metadata, &spec)
        .into_iter()
        .map(|f| f.reason)
        .collect()
}

fn plain() -> Pod {
    with(json!([{"name": "app", "image": "i"}]), json!({}))
}

/// What the restricted level asks of every container and the pod.
fn restricted_ok() -> Pod {
    with(
        json!([{"name": "app", "image": "i", "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]),
        json!({"securityContext": {"runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "cfg", "configMap": {"name": "c"}},
                {"name": "tmp", "emptyDir": {}}]}),
    )
}

#[test]
fn privileged_containers_of_every_kind() {
    let p = with(
        json!([{"name": "app", "image": "i", "securityContext": {"privileged": true}},
               {"name": "side", "image": "i", "securityContext": {"privileged": false}}]),
        json!({"initContainers": [{"name": "setup", "image": "i",
            "securityContext": {"privileged": true}}],
            "ephemeralContainers": [{"name": "debug", "image": "i",
            "securityContext": {"privileged": true}}]}),
    );
    assert_eq!(
        run(privileged, &p),
        found(
            "privileged",
            r#"containers "setup", "app", "debug" must not set securityContext.privileged=true"#
        )
    );
    assert_eq!(run(privileged, &plain()), None);
}

#[test]
fn host_path_volumes_named() {
    let p = with(
        json!([{"name": "app", "image": "i"}]),
        json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}},
            {"name": "tmp", "emptyDir": {}}]}),
    );
    assert_eq!(
        run(host_path_volumes, &p),
        found("hostPath volumes", r#"volume "root""#)
    );
    assert_eq!(run(host_path_volumes, &plain()), None);
}

#[test]
fn host_namespaces_listed() {
    let p = with(
        json!([{"name": "app", "image": "i"}]),
        json!({"hostNetwork": true, "hostPID": true, "hostIPC": false}),
    );
    assert_eq!(
        run(host_namespaces, &p),
        found("host namespaces", "hostNetwork=true, hostPID=true")
    );
    let ipc = with(
        json!([{"name": "a", "image": "i"}]),
        json!({"hostIPC": true}),
    );
    assert_eq!(
        run(host_namespaces, &ipc),
        found("host namespaces", "hostIPC=true")
    );
    assert_eq!(run(host_namespaces, &plain()), None);
}

#[test]
fn host_ports_listed_as_strings() {
    let p = with(
        json!([{"name": "a", "image": "i", "ports": [
                    {"containerPort": 80, "hostPort": 8080}, {"containerPort": 443, "hostPort": 443}]},
               {"name": "b", "image": "i", "ports": [{"containerPort": 80}]},
               {"name": "c", "image": "i", "ports": [{"containerPort": 81, "hostPort": 0}]}]),
        json!({}),
    );
    assert_eq!(
        run(host_ports, &p),
        found("hostPort", r#"container "a" uses hostPorts 443, 8080"#)
    );
    let two = with(
        json!([{"name": "a", "image": "i", "ports": [{"containerPort": 1, "hostPort": 9}]},
               {"name": "b", "image": "i", "ports": [{"containerPort": 1, "hostPort": 9}]}]),
        json!({}),
    );
    assert_eq!(
        run(host_ports, &two),
        found("hostPort", r#"containers "a", "b" use hostPort 9"#)
    );
}

#[test]
fn capabilities_beyond_the_baseline_set() {
    let p = with(
        json!([{"name": "a", "image": "i", "securityContext": {"capabilities":
                    {"add": ["NET_ADMIN", "SYS_ADMIN", "CHOWN"]}}},
               {"name": "b", "image": "i", "securityContext": {"capabilities": {"add": ["CHOWN"]}}}]),
        json!({"ephemeralContainers": [{"name": "debug", "image": "i",
            "securityContext": {"capabilities": {"add": ["SYS_PTRACE", "NET_ADMIN"]}}}]}),
    );
    assert_eq!(
        run(capabilities_baseline, &p),
        found(
            "non-default capabilities",
            r#"containers "a", "debug" must not include "NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE" in securityContext.capabilities.add"#
        )
    );
    assert_eq!(run(capabilities_baseline, &plain()), None);
}

#[test]
fn app_armor_profiles_in_fields_and_annotations() {
    let mut p = with(
        json!([{"name": "c", "image": "i", "securityContext": {"appArmorProfile":
                    {"type": "Localhost", "localhostProfile": "x"}}},
               {"name": "d", "image": "i", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]),
        json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
    );
    p.metadata.annotations = Some(BTreeMap::from([
        (
            "container.apparmor.security.beta.kubernetes.io/d".to_string(),
            "unconfined".to_string(),
        ),
        (
            "container.apparmor.security.beta.kubernetes.io/c".to_string(),
            "localhost/x".to_string(),
        ),
    ]));
    assert_eq!(
        run(app_armor_profile, &p),
        found(
            "forbidden AppArmor profiles",
            r#"pod and container "d" and annotation must not set AppArmor profile type to "Unconfined", "container.apparmor.security.beta.kubernetes.io/d="unconfined"""#
        )
    );
    let pod_only = with(
        json!([{"name": "c", "image": "i"}]),
        json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
    );
    assert_eq!(
        run(app_armor_profile, &pod_only),
        found(
            "forbidden AppArmor profile",
            r#"pod must not set AppArmor profile type to "Unconfined""#
        )
    );
    assert_eq!(run(app_armor_profile, &plain()), None);
}

#[test]
fn se_linux_options_by_version() {
    let p = with(
        json!([{"name": "c", "image": "i", "securityContext": {"seLinuxOptions": {"role": "r"}}}]),
        json!({"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u"}}}),
    );
    assert_eq!(
        run(se_linux_options_1_31, &p),
        found(
            "seLinuxOptions",
            r#"pod and container "c" set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set; role may not be set"#
        )
    );
    let engine = with(
        json!([{"name": "c", "image": "i", "securityContext":
            {"seLinuxOptions": {"type": "container_engine_t", "level": "s0:c1"}}}]),
        json!({}),
    );
    assert_eq!(run(se_linux_options_1_31, &engine), None);
    assert_eq!(
        run(se_linux_options_1_0, &engine),
        found(
            "seLinuxOptions",
            r#"container "c" set forbidden securityContext.seLinuxOptions: type "container_engine_t""#
        )
    );
    assert_eq!(at(Level::Baseline, 31, &engine), Vec::<String>::new());
    assert_eq!(at(Level::Baseline, 30, &engine), ["seLinuxOptions"]);
}

#[test]
fn proc_mount_and_user_namespaces() {
    let unmasked = |host_users: Value| {
        with(
            json!([{"name": "c", "image": "i", "securityContext": {"procMount": "Unmasked"}},
                   {"name": "d", "image": "i", "securityContext": {"procMount": "Default"}}]),
            json!({"hostUsers": host_users}),
        )
    };
    assert_eq!(
        run(proc_mount, &unmasked(json!(true))),
        found(
            "procMount",
            r#"container "c" must not set securityContext.procMount to "Unmasked""#
        )
    );
    // In a user namespace, baseline allows it from 1.35; restricted never does.
    let userns = unmasked(json!(false));
    assert_eq!(at(Level::Baseline, 35, &userns), Vec::<String>::new());
    assert_eq!(at(Level::Baseline, 34, &userns), ["procMount"]);
    assert!(at(Level::Restricted, 36, &userns).contains(&"procMount".to_string()));
    assert_eq!(
        at(Level::Baseline, 36, &unmasked(json!(true))),
        ["procMount"]
    );
}

#[test]
fn seccomp_unconfined_in_fields_from_1_19_and_annotations_before() {
    let p = with(
        json!([{"name": "c", "image": "i", "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
               {"name": "d", "image": "i", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]),
        json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
    );
    assert_eq!(
        run(seccomp_profile_baseline, &p),
        found(
            "seccompProfile",
            r#"pod and container "c" must not set securityContext.seccompProfile.type to "Unconfined""#
        )
    );
    assert_eq!(run(seccomp_profile_baseline, &plain()), None);
    let mut annotated = plain();
    annotated.metadata.annotations = Some(BTreeMap::from([
        (
            "seccomp.security.alpha.kubernetes.io/pod".to_string(),
            "unconfined".to_string(),
        ),
        (
            "container.seccomp.security.alpha.kubernetes.io/app".to_string(),
            "docker/default".to_string(),
        ),
    ]));
    assert_eq!(
        run(seccomp_annotations, &annotated),
        found(
            "seccompProfile",
            r#"forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined""#
        )
    );
    assert_eq!(at(Level::Baseline, 18, &annotated), ["seccompProfile"]);
    assert_eq!(at(Level::Baseline, 19, &annotated), Vec::<String>::new());
}

#[test]
fn sysctls_allowed_grow_with_the_version() {
    let p = with(
        json!([{"name": "c", "image": "i"}]),
        json!({"securityContext": {"sysctls": [
            {"name": "kernel.msgmax", "value": "1"},
            {"name": "net.ipv4.tcp_keepalive_time", "value": "1"},
            {"name": "net.ipv4.ip_local_port_range", "value": "1 2"}]}}),
    );
    assert_eq!(
        run(sysctls_1_27, &p),
        found(
            "forbidden sysctls",
            "kernel.msgmax, net.ipv4.tcp_keepalive_time"
        )
    );
    assert_eq!(
        run(sysctls_1_29, &p),
        found("forbidden sysctls", "kernel.msgmax")
    );
    let rmem = with(
        json!([{"name": "c", "image": "i"}]),
        json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"}]}}),
    );
    assert_eq!(at(Level::Baseline, 31, &rmem), ["forbidden sysctls"]);
    assert_eq!(at(Level::Baseline, 32, &rmem), Vec::<String>::new());
    // v1.37 allows two more (pod-security-admission v0.37's sysctlsAllowedV1Dot37).
    let lowat = with(
        json!([{"name": "c", "image": "i"}]),
        json!({"securityContext": {"sysctls": [
            {"name": "net.ipv4.tcp_notsent_lowat", "value": "1"},
            {"name": "net.ipv4.tcp_slow_start_after_idle", "value": "0"}]}}),
    );
    assert_eq!(at(Level::Baseline, 36, &lowat), ["forbidden sysctls"]);
    assert_eq!(at(Level::Baseline, 37, &lowat), Vec::<String>::new());
}

#[test]
fn windows_host_process_on_pod_and_containers() {
    let p = with(
        json!([{"name": "w", "image": "i", "securityContext": {"windowsOptions": {"hostProcess": true}}},
               {"name": "x", "image": "i", "securityContext": {"windowsOptions": {"hostProcess": false}}}]),
        json!({"securityContext": {"windowsOptions": {"hostProcess": true}}}),
    );
    assert_eq!(
        run(windows_host_process, &p),
        found(
            "hostProcess",
            r#"pod and container "w" must not set securityContext.windowsOptions.hostProcess=true"#
        )
    );
    assert_eq!(run(windows_host_process, &plain()), None);
}

#[test]
fn probe_and_lifecycle_hosts_from_1_34() {
    let p = with(
        json!([{"name": "c", "image": "i",
            "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}},
            "readinessProbe": {"tcpSocket": {"port": 80}},
            "lifecycle": {"preStop": {"tcpSocket": {"host": "metadata", "port": 80}}}}]),
        json!({}),
    );
    assert_eq!(
        run(host_probes_and_lifecycle, &p),
        found(
            "probe or lifecycle host",
            r#"container "c" uses probe or lifecycle hosts "10.0.0.1", "metadata""#
        )
    );
    assert_eq!(at(Level::Baseline, 34, &p), ["probe or lifecycle host"]);
    assert_eq!(at(Level::Baseline, 33, &p), Vec::<String>::new());
}

#[test]
fn allow_privilege_escalation_and_windows_pods() {
    let p = with(
        json!([{"name": "a", "image": "i"},
               {"name": "b", "image": "i", "securityContext": {"allowPrivilegeEscalation": false}},
               {"name": "c", "image": "i", "securityContext": {"allowPrivilegeEscalation": true}}]),
        json!({}),
    );
    assert_eq!(
        run(allow_privilege_escalation, &p),
        found(
            "allowPrivilegeEscalation != false",
            r#"containers "a", "c" must set securityContext.allowPrivilegeEscalation=false"#
        )
    );
    let windows = with(
        json!([{"name": "a", "image": "i"}]),
        json!({"os": {"name": "windows"}}),
    );
    assert_eq!(run(allow_privilege_escalation_1_25, &windows), None);
    assert!(run(allow_privilege_escalation, &windows).is_some());
    // Not a check before 1.8.
    assert!(!at(Level::Restricted, 7, &p).contains(&"allowPrivilegeEscalation != false".into()));
}

#[test]
fn restricted_capabilities_drop_all_add_net_bind_service_only() {
    let p = with(
        json!([{"name": "a", "image": "i"},
               {"name": "b", "image": "i", "securityContext": {"capabilities":
                    {"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "SYS_TIME"]}}},
               {"name": "c", "image": "i", "securityContext": {"capabilities": {"drop": ["ALL"]}}}]),
        json!({}),
    );
    assert_eq!(
        run(capabilities_restricted, &p),
        found(
            "unrestricted capabilities",
            r#"container "a" must set securityContext.capabilities.drop=["ALL"]; container "b" must not include "SYS_TIME" in securityContext.capabilities.add"#
        )
    );
    // From 1.22 it replaces the baseline capability check.
    let admin = with(
        json!([{"name": "a", "image": "i", "securityContext": {"capabilities":
            {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}}]),
        json!({}),
    );
    let reasons = at(Level::Restricted, 22, &admin);
    assert!(
        reasons.contains(&"unrestricted capabilities".into()),
        "{reasons:?}"
    );
    assert!(
        !reasons.contains(&"non-default capabilities".into()),
        "{reasons:?}"
    );
    let reasons = at(Level::Restricted, 21, &admin);
    assert!(
        reasons.contains(&"non-default capabilities".into()),
        "{reasons:?}"
    );
}

#[test]
fn restricted_volume_types() {
    let p = with(
        json!([{"name": "a", "image": "i"}]),
        json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}},
            {"name": "share", "nfs": {"server": "s", "path": "/x"}},
            {"name": "cfg", "configMap": {"name": "c"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
            {"name": "token", "projected": {"sources": []}},
            // No source: defaulted to an emptyDir before admission.
            {"name": "scratch"}]}),
    );
    assert_eq!(
        run(restricted_volumes, &p),
        found(
            "restricted volume types",
            r#"volumes "root", "share" use restricted volume types "hostPath", "nfs""#
        )
    );
    // It replaces the baseline hostPath check.
    let reasons = at(Level::Restricted, 36, &p);
    assert!(!reasons.contains(&"hostPath volumes".into()), "{reasons:?}");
}

#[test]
fn run_as_non_root_on_the_pod_or_every_container() {
    assert_eq!(
        run(run_as_non_root, &plain()),
        found(
            "runAsNonRoot != true",
            r#"pod or container "app" must set securityContext.runAsNonRoot=true"#
        )
    );
    let explicit = with(
        json!([{"name": "a", "image": "i", "securityContext": {"runAsNonRoot": false}},
               {"name": "b", "image": "i"}]),
        json!({"securityContext": {"runAsNonRoot": true}}),
    );
    assert_eq!(
        run(run_as_non_root, &explicit),
        found(
            "runAsNonRoot != true",
            r#"container "a" must not set securityContext.runAsNonRoot=false"#
        )
    );
    let userns = with(
        json!([{"name": "a", "image": "i"}]),
        json!({"hostUsers": false}),
    );
    assert_eq!(run(run_as_non_root_1_35, &userns), None);
    assert!(run(run_as_non_root, &userns).is_some());
}

#[test]
fn run_as_user_zero_from_1_23() {
    let p = with(
        json!([{"name": "a", "image": "i", "securityContext": {"runAsUser": 0}},
               {"name": "b", "image": "i", "securityContext": {"runAsUser": 1000}}]),
        json!({"securityContext": {"runAsUser": 0}}),
    );
    assert_eq!(
        run(run_as_user, &p),
        found(
            "runAsUser=0",
            r#"pod and container "a" must not set runAsUser=0"#
        )
    );
    assert!(at(Level::Restricted, 23, &p).contains(&"runAsUser=0".into()));
    assert!(!at(Level::Restricted, 22, &p).contains(&"runAsUser=0".into()));
    let mut userns = p.clone();
    if let Some(s) = userns.spec.as_mut() {
        s.host_users = Some(false);
    }
    assert_eq!(run(run_as_user_1_35, &userns), None);
}

#[test]
fn restricted_seccomp_must_be_set() {
    assert_eq!(
        run(seccomp_profile_restricted, &plain()),
        found(
            "seccompProfile",
            r#"pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#
        )
    );
    let per_container = with(
        json!([{"name": "a", "image": "i", "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}}]),
        json!({}),
    );
    assert_eq!(run(seccomp_profile_restricted, &per_container), None);
    let unconfined = with(
        json!([{"name": "a", "image": "i", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]),
        json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}),
    );
    assert_eq!(
        run(seccomp_profile_restricted, &unconfined),
        found(
            "seccompProfile",
            r#"container "a" must not set securityContext.seccompProfile.type to "Unconfined""#
        )
    );
}

#[test]
fn levels_and_versions_from_namespace_labels_as_psa_reads_them() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(Enforce::from_labels(None).to_string(), "privileged:latest");
    assert_eq!(
        Enforce::from_labels(Some(&labels(&[]))).to_string(),
        "privileged:latest",
        "no label: the leaf's default, assumed privileged"
    );
    assert_eq!(
        Enforce::from_labels(Some(&labels(&[(ENFORCE_LABEL, "baseline")]))).to_string(),
        "baseline:latest"
    );
    assert_eq!(
        Enforce::from_labels(Some(&labels(&[
            (ENFORCE_LABEL, "restricted"),
            (ENFORCE_VERSION_LABEL, "v1.30")
        ])))
        .to_string(),
        "restricted:v1.30"
    );
    // Not a level: restricted, as PSA does. Not a version: latest.
    for bad in ["Baseline", "", "none"] {
        assert_eq!(
            Enforce::from_labels(Some(&labels(&[(ENFORCE_LABEL, bad)]))).level,
            Level::Restricted,
            "{bad:?}"
        );
    }
    for bad in ["1.30", "v1.030", "v2.1", "v1.", "latest"] {
        assert_eq!(Version::parse(bad), Version::Latest, "{bad:?}");
    }
    assert_eq!(Version::parse("v1.0"), Version::Minor(0));
    // `latest` is the leaf's version; none is newer than the leaf's or than the checks'.
    assert_eq!(Version::Latest.effective(Some(30)), 30);
    assert_eq!(Version::Latest.effective(None), NEWEST_MINOR);
    assert_eq!(Version::Latest.effective(Some(40)), NEWEST_MINOR);
    assert_eq!(Version::Minor(40).effective(Some(33)), 33);
    assert_eq!(Version::Minor(20).effective(Some(33)), 20);
}

#[test]
fn reasons_in_psa_order_with_details() {
    let p = with(
        json!([{"name": "app", "image": "i", "securityContext": {"privileged": true}}]),
        json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
    );
    let baseline = Enforce {
        level: Level::Baseline,
        version: Version::Latest,
    };
    let spec = p.spec.clone().unwrap_or_default();
    assert_eq!(
        baseline.refusal(&p.metadata, &spec, None).as_deref(),
        Some(
            r#"hostPath volumes (volume "root"), privileged (container "app" must not set securityContext.privileged=true)"#
        )
    );
    assert_eq!(
        Enforce::default().refusal(&p.metadata, &spec, None),
        None,
        "privileged allows anything"
    );
    // Restricted: the baseline reasons first, then the restricted ones, by check ID.
    assert_eq!(
        at(Level::Restricted, 36, &p),
        [
            "privileged",
            "allowPrivilegeEscalation != false",
            "unrestricted capabilities",
            "restricted volume types",
            "runAsNonRoot != true",
            "seccompProfile"
        ]
    );
    let ok = restricted_ok();
    let spec = ok.spec.clone().unwrap_or_default();
    for minor in [0, 8, 19, 22, 25, 35, 36] {
        assert_eq!(
            evaluate(Level::Restricted, minor, &ok.metadata, &spec),
            Vec::new(),
            "v1.{minor}"
        );
    }
    // Byte order of IDs: seLinuxOptions before seccompProfile_baseline.
    let both = with(
        json!([{"name": "c", "image": "i", "securityContext": {
            "seLinuxOptions": {"user": "u"}, "seccompProfile": {"type": "Unconfined"}}}]),
        json!({}),
    );
    assert_eq!(
        at(Level::Baseline, 36, &both),
        ["seLinuxOptions", "seccompProfile"]
    );
}
