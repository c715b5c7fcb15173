use super::*;
use crate::config;

/// API groups, resources, verbs and resource names of a rule.
type ExpectedRule = (
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
    Option<&'static [&'static str]>,
);

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
    // The policy CRDs first: cluster-scoped, needed by nothing else.
    assert_eq!(kinds[..2], ["CustomResourceDefinition"; 2]);
    assert_eq!(kinds.get(2), Some(&"Namespace"));
    assert_eq!(kinds.get(3), Some(&"ServiceAccount"));
    let pos = |k: &str| kinds.iter().position(|x| *x == k).expect(k);
    assert!(pos("RoleBinding") < pos("ConfigMap"));
    assert!(pos("ConfigMap") < pos("Deployment"));
    assert!(pos("Service") < pos("Deployment"));
    // The APIService last: the API server routes to the Service as soon as it exists.
    assert_eq!(kinds.last(), Some(&"APIService"));
    let refs: Vec<String> = objects.iter().map(Object::reference).collect();
    let at = |r: &str| refs.iter().position(|x| x == r).expect(r);
    assert!(at("service/mcsched-api") < at("deployment/mcsched-agent"));
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
    // operator binds per namespace, the agent's own APIService, and the users' roles.
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut cluster_roles = Vec::new();
    for o in &objects {
        if let Object::ClusterRole(cr) = o {
            let name = cr.metadata.name.clone().unwrap_or_default();
            let mut rules = cr.rules.clone().unwrap_or_default();
            if name == "mcsched-agent-placement-keeper" {
                let eviction = rules.split_off(1);
                assert_eq!(eviction[0].resources, Some(strings(&["pods/eviction"])));
                assert_eq!(eviction[0].verbs, strings(&["create"]));
            }
            if name == "mcsched-agent" {
                // PriorityClasses read (what-ifs' priority), PodGroups, its placement
                // policies read, and their status written.
                let mut policy_rules = rules.split_off(1);
                let classes = policy_rules.remove(0);
                assert_eq!(classes.api_groups, Some(strings(&["scheduling.k8s.io"])));
                assert_eq!(classes.resources, Some(strings(&["priorityclasses"])));
                assert_eq!(classes.verbs, strings(&["get", "list", "watch"]));
                // PodGroups read, their status written (kube-scheduler's with its gate).
                let groups_read = policy_rules.remove(0);
                assert_eq!(groups_read.resources, Some(strings(&["podgroups"])));
                assert_eq!(groups_read.verbs, strings(&["get", "list", "watch"]));
                let groups_status = policy_rules.remove(0);
                assert_eq!(
                    groups_status.resources,
                    Some(strings(&["podgroups/status"]))
                );
                assert_eq!(groups_status.verbs, strings(&["patch", "update"]));
                // Devices: system:kube-scheduler's resource.k8s.io rules, in its order, and the
                // templates pod sync copies.
                let read = ["get", "list", "watch"];
                let read_update = ["get", "list", "watch", "update", "patch"];
                let expected: [(&str, &[&str]); 8] = [
                    ("deviceclasses", &read),
                    ("resourceclaims", &read_update),
                    ("resourceclaims/status", &read_update),
                    ("resourceslices", &read),
                    ("resourceclaims", &["create", "delete"]),
                    ("devicetaintrules", &read),
                    ("resourceclaims/binding", &["update", "patch"]),
                    // Pod sync's copies of the templates, read by name.
                    ("resourceclaimtemplates", &["get"]),
                ];
                for (resource, verbs) in expected {
                    let r = policy_rules.remove(0);
                    assert_eq!(r.api_groups, Some(strings(&["resource.k8s.io"])));
                    assert_eq!(r.resources, Some(strings(&[resource])));
                    assert_eq!(r.verbs, strings(verbs), "{resource}");
                    assert_eq!(r.resource_names, None, "{resource}");
                }
                let groups: Vec<_> = policy_rules.iter().map(|r| r.api_groups.clone()).collect();
                assert_eq!(groups, vec![Some(strings(&["policy.mcsched.io"])); 2]);
                assert_eq!(
                    policy_rules[0].resources,
                    Some(strings(&["placementpolicies", "clusterplacementpolicies"]))
                );
                assert_eq!(policy_rules[0].verbs, strings(&["get", "list", "watch"]));
                assert_eq!(policy_rules[1].verbs, strings(&["patch"]));
                assert!(
                    policy_rules[1]
                        .resources
                        .iter()
                        .flatten()
                        .all(|r| r.ends_with("/status"))
                );
            }
            assert_eq!(rules.len(), 1, "{name}");
            let r = &rules[0];
            let (groups, resources, verbs, names): ExpectedRule = match name.as_str() {
                "mcsched-agent-configmap-reader" => {
                    (&[""], &["configmaps"], &["get", "list", "watch"], None)
                }
                "mcsched-agent-secret-reader" => {
                    (&[""], &["secrets"], &["get", "list", "watch"], None)
                }
                "mcsched-agent-placement-keeper" => (&[""], &["pods"], &["patch"], None),
                "mcsched-agent" => (
                    &["apiregistration.k8s.io"],
                    &["apiservices"],
                    &["get", "patch"],
                    Some(&["v1alpha1.mcsched.io"]),
                ),
                "mcsched:explanation-reader" => {
                    (&["mcsched.io"], &["explanations"], &["get", "list"], None)
                }
                "mcsched:whatif-creator" => (&["mcsched.io"], &["whatifs"], &["create"], None),
                "mcsched:placementpolicy-viewer" => (
                    &["policy.mcsched.io"],
                    &["placementpolicies"],
                    &["get", "list", "watch"],
                    None,
                ),
                "mcsched:placementpolicy-editor" => (
                    &["policy.mcsched.io"],
                    &["placementpolicies"],
                    &["create", "update", "patch", "delete", "deletecollection"],
                    None,
                ),
                _ => panic!("unexpected ClusterRole {name}"),
            };
            assert_eq!(r.api_groups, Some(strings(groups)), "{name}");
            assert_eq!(r.resources, Some(strings(resources)), "{name}");
            assert_eq!(r.verbs, strings(verbs), "{name}");
            assert_eq!(r.resource_names, names.map(strings), "{name}");
            cluster_roles.push(name);
        }
        if let Object::ClusterRoleBinding(b) = o {
            let role = &b.role_ref.name;
            assert!(
                role.starts_with("system:") || role == "mcsched-agent",
                "cluster-wide binding to {role}"
            );
        }
    }
    assert_eq!(cluster_roles.len(), 8, "{cluster_roles:?}");
    for (name, role) in [
        ("clusterrolebinding/mcsched-agent", "mcsched-agent"),
        (
            "clusterrolebinding/mcsched-agent:auth-delegator",
            "system:auth-delegator",
        ),
    ] {
        let Object::ClusterRoleBinding(b) = by_ref(&objects, name, None) else {
            unreachable!()
        };
        assert_eq!(b.role_ref.kind, "ClusterRole");
        assert_eq!(b.role_ref.name, role);
        let subjects = b.subjects.clone().unwrap_or_default();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].name, "mcsched-agent");
        assert_eq!(subjects[0].namespace.as_deref(), Some("mcsched-system"));
    }
    // The leader's EndpointSlice, by name only.
    let slices = rules
        .iter()
        .find(|r| r.resources == Some(vec!["endpointslices".to_string()]))
        .expect("endpointslices rule");
    assert_eq!(slices.api_groups, Some(strings(&["discovery.k8s.io"])));
    assert_eq!(slices.verbs, strings(&["get", "create", "patch"]));
    assert_eq!(slices.resource_names, Some(strings(&["mcsched-api"])));
}

#[test]
fn user_roles_aggregate_into_the_built_in_ones() {
    let objects = render(&InstallOptions::default()).expect("renders");
    let aggregated = |name: &str| {
        let Object::ClusterRole(cr) = by_ref(&objects, &format!("clusterrole/{name}"), None) else {
            unreachable!()
        };
        let labels = cr.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(crate::keys::INSTALL_LABEL).map(String::as_str),
            Some("mcsched-system"),
            "{name}"
        );
        let mut into: Vec<String> = labels
            .iter()
            .filter_map(|(k, v)| {
                let role = k.strip_prefix("rbac.authorization.k8s.io/aggregate-to-")?;
                assert_eq!(v, "true", "{k}");
                Some(role.to_string())
            })
            .collect();
        into.sort();
        into
    };
    assert_eq!(
        aggregated(crate::keys::EXPLANATION_READER_ROLE),
        vec!["admin", "edit", "view"]
    );
    assert_eq!(
        aggregated(crate::keys::WHATIF_CREATOR_ROLE),
        vec!["admin", "edit"]
    );
}

#[test]
fn the_api_service_points_at_the_selector_less_service() {
    let objects = render(&InstallOptions {
        namespace: "mc".into(),
        ..Default::default()
    })
    .expect("renders");
    let Object::APIService(api) = by_ref(&objects, "apiservice/v1alpha1.mcsched.io", None) else {
        unreachable!()
    };
    assert_eq!(api.spec.group, "mcsched.io");
    assert_eq!(api.spec.version, "v1alpha1");
    assert_eq!(api.spec.group_priority_minimum, 100);
    assert_eq!(api.spec.version_priority, 100);
    assert_eq!(
        api.spec.service,
        Some(ServiceReference {
            namespace: "mc".into(),
            name: "mcsched-api".into(),
            port: Some(443),
        })
    );
    // Applied as sent: apiVersion and kind, and neither caBundle (the leader's) nor
    // insecureSkipTLSVerify.
    let json = Object::APIService(api.clone()).to_json();
    assert_eq!(json["apiVersion"], "apiregistration.k8s.io/v1");
    assert_eq!(json["kind"], "APIService");
    assert_eq!(json["metadata"]["name"], "v1alpha1.mcsched.io");
    assert_eq!(json["metadata"]["labels"]["mcsched.io/install"], "mc");
    let spec = json["spec"].as_object().expect("spec");
    let mut fields: Vec<&str> = spec.keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        vec![
            "group",
            "groupPriorityMinimum",
            "service",
            "version",
            "versionPriority"
        ]
    );
    let back: APIService = serde_json::from_value(json).expect("reads back");
    assert_eq!(&back, api);

    let Object::Service(svc) = by_ref(&objects, "service/mcsched-api", Some("mc")) else {
        unreachable!()
    };
    let spec = svc.spec.clone().expect("spec");
    assert_eq!(spec.selector, None, "the leader writes its EndpointSlice");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let ports = spec.ports.unwrap_or_default();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].name.as_deref(), Some("https"));
    assert_eq!(ports[0].port, 443);
    assert_eq!(
        ports[0].target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(10259))
    );
    // The metrics Service stays, selecting every replica.
    let Object::Service(metrics) = by_ref(&objects, "service/mcsched-agent", Some("mc")) else {
        unreachable!()
    };
    assert_eq!(
        metrics.spec.as_ref().and_then(|s| s.selector.clone()),
        Some(pod_selector())
    );
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
    let spec = &d.spec;
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
    let env: Vec<(String, String)> = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let field = e
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.clone())
                .unwrap_or_default();
            (e.name.clone(), field)
        })
        .collect();
    assert_eq!(
        env,
        vec![
            (
                "POD_NAMESPACE".to_string(),
                "metadata.namespace".to_string()
            ),
            ("POD_IP".to_string(), "status.podIP".to_string()),
        ]
    );
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
            .template
            .metadata
            .as_ref()
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
    let resources: Vec<_> = rules.iter().map(|r| r.resources.clone()).collect();
    assert_eq!(
        resources,
        vec![
            Some(vec!["secrets".to_string()]),
            Some(vec!["endpointslices".to_string()])
        ]
    );
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
    assert_eq!(list["items"][0]["kind"], "CustomResourceDefinition");
}

#[test]
fn node_selector_pins_the_agent_and_is_absent_by_default() {
    let pod_spec = |opts: &InstallOptions| {
        let objects = render(opts).expect("renders");
        let Object::Deployment(d) =
            by_ref(&objects, "deployment/mcsched-agent", Some("mcsched-system"))
        else {
            unreachable!()
        };
        d.spec.template.spec.clone().expect("pod spec")
    };
    assert_eq!(pod_spec(&InstallOptions::default()).node_selector, None);
    let selector = BTreeMap::from([(
        "node-role.kubernetes.io/control-plane".to_string(),
        String::new(),
    )]);
    let pinned = pod_spec(&InstallOptions {
        node_selector: selector.clone(),
        ..Default::default()
    });
    assert_eq!(pinned.node_selector, Some(selector));
}
