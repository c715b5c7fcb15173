use super::*;
use crate::config;

fn by_ref<'a>(objects: &'a [Object], reference: &str, ns: Option<&str>) -> &'a Object {
    objects
        .iter()
        .find(|o| o.reference() == reference && o.namespace() == ns)
        .unwrap_or_else(|| panic!("{reference} in {ns:?} not rendered"))
}

#[test]
fn default_install_renders_in_dependency_order() {
    let objects = render(&InstallOptions::default()).expect("default renders");
    let kinds: Vec<&str> = objects.iter().map(Object::kind).collect();
    assert_eq!(kinds.first(), Some(&"Namespace"));
    assert_eq!(kinds.get(1), Some(&"ServiceAccount"));
    let pos = |k: &str| kinds.iter().position(|x| *x == k).expect(k);
    assert!(pos("RoleBinding") < pos("ConfigMap"));
    assert!(pos("ConfigMap") < pos("Deployment"));
    assert!(pos("Service") < pos("Deployment"));
    // One replica: no PodDisruptionBudget.
    assert!(!kinds.contains(&"PodDisruptionBudget"));
    for o in &objects {
        let labels = o.metadata().labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(crate::keys::INSTALL_LABEL).map(String::as_str),
            Some("mcsched-system"),
            "{} lacks the install label",
            o.reference()
        );
    }
}

#[test]
fn default_config_names_profile_and_lease() {
    let objects = render(&InstallOptions {
        scheduler_name: Some("edge".into()),
        namespace: "mc".into(),
        ..Default::default()
    })
    .expect("renders");
    let Object::ConfigMap(cm) = by_ref(&objects, "configmap/mcsched-agent-config", Some("mc"))
    else {
        unreachable!()
    };
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("config.yaml"))
        .expect("config.yaml");
    let cfg = config::load(text).expect("the agent's parser accepts it");
    assert_eq!(cfg.profiles[0].scheduler_name, "edge");
    assert!(cfg.leader_election.leader_elect);
    assert_eq!(cfg.leader_election.resource_name, "edge");
    assert_eq!(cfg.leader_election.resource_namespace, "mc");
}

#[test]
fn rbac_has_no_wildcards_and_the_lease_is_named() {
    let objects = render(&InstallOptions::default()).expect("renders");
    for o in &objects {
        let rules = match o {
            Object::Role(r) => r.rules.clone().unwrap_or_default(),
            Object::ClusterRole(r) => r.rules.clone().unwrap_or_default(),
            _ => continue,
        };
        for r in rules {
            let all: Vec<String> = r
                .verbs
                .iter()
                .chain(r.resources.iter().flatten())
                .chain(r.api_groups.iter().flatten())
                .cloned()
                .collect();
            assert!(
                !all.iter().any(|s| s.contains('*')),
                "{}: {all:?}",
                o.reference()
            );
        }
    }
    let Object::Role(role) = by_ref(&objects, "role/mcsched-agent", Some("mcsched-system")) else {
        unreachable!()
    };
    let rules = role.rules.clone().unwrap_or_default();
    let update = rules
        .iter()
        .find(|r| r.verbs.contains(&"update".to_string()))
        .expect("lease update rule");
    assert_eq!(update.resource_names, Some(vec!["mcsched".to_string()]));
    let secrets = rules
        .iter()
        .find(|r| r.resources == Some(vec!["secrets".to_string()]))
        .expect("secrets rule");
    assert_eq!(secrets.verbs, vec!["get", "list", "watch"]);
    // No pod creation and no ConfigMap or Secret reads cluster-wide: only roles the
    // operator binds per namespace.
    for o in &objects {
        if let Object::ClusterRole(cr) = o {
            let name = cr.metadata.name.clone().unwrap_or_default();
            assert!(
                name == "mcsched-agent-configmap-reader" || name == "mcsched-agent-secret-reader",
                "unexpected ClusterRole {name}"
            );
            for r in cr.rules.iter().flatten() {
                assert_eq!(r.verbs, vec!["get"], "{name}");
            }
        }
        if let Object::ClusterRoleBinding(b) = o {
            let role = &b.role_ref.name;
            assert!(
                role.starts_with("system:"),
                "cluster-wide binding to {role}"
            );
        }
    }
}

#[test]
fn deployment_is_hardened_and_probed() {
    let objects = render(&InstallOptions {
        replicas: 2,
        image: "example.com/agent:dev".into(),
        ..Default::default()
    })
    .expect("renders");
    let Object::Deployment(d) =
        by_ref(&objects, "deployment/mcsched-agent", Some("mcsched-system"))
    else {
        unreachable!()
    };
    let spec = d.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().expect("pod spec");
    let psc = pod.security_context.as_ref().expect("pod security context");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("example.com/agent:dev"));
    assert_eq!(
        c.args,
        Some(vec![
            "--config".to_string(),
            "/etc/mcsched/config.yaml".to_string()
        ])
    );
    let sc = c
        .security_context
        .as_ref()
        .expect("container security context");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()])
    );
    let live = c.liveness_probe.as_ref().and_then(|p| p.http_get.as_ref());
    assert_eq!(live.and_then(|g| g.path.as_deref()), Some("/healthz"));
    assert_eq!(live.and_then(|g| g.scheme.as_deref()), Some("HTTPS"));
    assert!(
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some()
    );
    // Two replicas: a PodDisruptionBudget.
    by_ref(
        &objects,
        "poddisruptionbudget/mcsched-agent",
        Some("mcsched-system"),
    );
}

#[test]
fn config_change_changes_the_pod_template() {
    let hash = |name: &str| {
        let objects = render(&InstallOptions {
            scheduler_name: Some(name.into()),
            ..Default::default()
        })
        .expect("renders");
        let Object::Deployment(d) =
            by_ref(&objects, "deployment/mcsched-agent", Some("mcsched-system"))
        else {
            unreachable!()
        };
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.clone())
            .and_then(|a| a.get(crate::keys::CONFIG_HASH_ANNOTATION).cloned())
            .expect("hash annotation")
    };
    assert_ne!(hash("a"), hash("b"));
    assert_eq!(hash("a"), hash("a"));
}

fn with_config(text: &str, replicas: i32) -> Result<Vec<Object>, ManifestError> {
    render(&InstallOptions {
        config: Some((text.into(), "sched.yaml".into())),
        replicas,
        ..Default::default()
    })
}

#[test]
fn user_config_errors_name_the_field() {
    let bad_plugin = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n  plugins:\n    filter:\n      enabled:\n      - name: Foo\n";
    let err = with_config(bad_plugin, 1).expect_err("unknown plugin");
    let msg = err.to_string();
    assert!(msg.contains("sched.yaml"), "{msg}");
    assert!(
        msg.contains("profiles[0].plugins.filter.enabled[0].name"),
        "{msg}"
    );

    // v1's default lease namespace is kube-system: not where the Role is.
    let other_ns = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n";
    let msg = with_config(other_ns, 1).expect_err("lease ns").to_string();
    assert!(
        msg.starts_with("sched.yaml: leaderElection.resourceNamespace: is \"kube-system\""),
        "{msg}"
    );

    let no_election = "apiVersion: kubescheduler.config.k8s.io/v1beta2\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: my-scheduler\nleaderElection:\n  leaderElect: false\n";
    assert!(with_config(no_election, 1).is_ok());
    let msg = with_config(no_election, 3)
        .expect_err("replicas without election")
        .to_string();
    assert!(msg.contains("leaderElection.leaderElect"), "{msg}");

    let err = render(&InstallOptions {
        config: Some((no_election.into(), "sched.yaml".into())),
        scheduler_name: Some("mcsched".into()),
        ..Default::default()
    })
    .expect_err("name not in file");
    assert!(err.to_string().starts_with("--scheduler-name:"), "{err}");
}

#[test]
fn user_config_without_election_gets_no_lease_rules() {
    let text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\nleaderElection:\n  leaderElect: false\n";
    let objects = with_config(text, 1).expect("renders");
    let Object::Role(role) = by_ref(&objects, "role/mcsched-agent", Some("mcsched-system")) else {
        unreachable!()
    };
    let rules = role.rules.clone().unwrap_or_default();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].resources, Some(vec!["secrets".to_string()]));
}

#[test]
fn bad_options_name_the_flag() {
    for (opts, flag) in [
        (
            InstallOptions {
                namespace: "Bad_NS".into(),
                ..Default::default()
            },
            "--namespace",
        ),
        (
            InstallOptions {
                replicas: 0,
                ..Default::default()
            },
            "--replicas",
        ),
        (
            InstallOptions {
                image: " ".into(),
                ..Default::default()
            },
            "--image",
        ),
        (
            InstallOptions {
                scheduler_name: Some("Not A Name".into()),
                ..Default::default()
            },
            "--scheduler-name",
        ),
    ] {
        let msg = render(&opts).expect_err(flag).to_string();
        assert!(msg.starts_with(&format!("{flag}: ")), "{msg}");
    }
}

#[test]
fn yaml_stream_starts_each_document_with_api_version() {
    let objects = render(&InstallOptions::default()).expect("renders");
    let yaml = to_yaml_stream(&objects).expect("yaml");
    let docs: Vec<&str> = yaml.split("---\n").filter(|d| !d.is_empty()).collect();
    assert_eq!(docs.len(), objects.len());
    for d in docs {
        assert!(d.starts_with("apiVersion: "), "{d}");
    }
    let list = to_json_list(&objects);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(objects.len()));
    assert_eq!(list["items"][0]["kind"], "Namespace");
}
