use super::*;

fn ok(text: &str) -> SchedulerConfig {
    match load(text) {
        Ok(c) => c,
        Err(e) => panic!("expected to load:\n{e}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

fn names(list: &[PluginRef]) -> Vec<&str> {
    list.iter().map(|p| p.name.as_str()).collect()
}

fn testdata(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/config")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const V1: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

#[test]
fn v1_defaults() {
    let c = ok(V1);
    assert_eq!(c.parallelism, 16);
    assert_eq!(c.percentage_of_nodes_to_score, None);
    assert_eq!(
        (c.pod_initial_backoff_seconds, c.pod_max_backoff_seconds),
        (1, 10)
    );
    let le = &c.leader_election;
    assert!(le.leader_elect);
    assert_eq!(
        (
            le.lease_duration.as_secs(),
            le.renew_deadline.as_secs(),
            le.retry_period.as_secs()
        ),
        (15, 10, 2)
    );
    assert_eq!(
        (c.client_connection.qps, c.client_connection.burst),
        (50.0, 100)
    );
    assert_eq!(c.profiles.len(), 1);
    let p = &c.profiles[0];
    assert_eq!(p.scheduler_name, "default-scheduler");
    assert_eq!(names(&p.plugins.queue_sort), vec!["PrioritySort"]);
    assert_eq!(
        names(&p.plugins.pre_enqueue),
        vec!["SchedulingGates", "DynamicResources", "GangScheduling"]
    );
    assert_eq!(names(&p.plugins.permit), vec!["GangScheduling"]);
    assert_eq!(
        names(&p.plugins.reserve),
        vec!["VolumeBinding", "DynamicResources", "LeafNodeFit"]
    );
    assert_eq!(
        names(&p.plugins.pre_bind),
        vec!["VolumeBinding", "DynamicResources"]
    );
    assert_eq!(
        names(&p.plugins.pre_filter),
        vec![
            "NodeAffinity",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
            // mcsched's, always on (catalog::ALWAYS_ON).
            "LeafNodeFit",
            "PlacementPolicy"
        ]
    );
    // v1.37's order: NodeName first, NodeDeclaredFeatures after the others.
    assert_eq!(
        names(&p.plugins.filter),
        vec![
            "NodeName",
            "NodeUnschedulable",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
            // mcsched's, always on (catalog::ALWAYS_ON).
            "LeafNodeFit",
            "PlacementPolicy"
        ]
    );
    let weights: Vec<(&str, i32)> = p
        .plugins
        .score
        .iter()
        .map(|r| (r.name.as_str(), r.weight))
        .collect();
    assert_eq!(
        weights,
        vec![
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            // StorageCapacityScoring (beta, on in v1.37): weight 1 as multiPoint gives it.
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("DynamicResources", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
            // Always on, outweighing the others together twice over.
            ("PlacementPolicy", 31)
        ]
    );
    assert_eq!(
        names(&p.plugins.post_filter),
        vec!["DynamicResources", "DefaultPreemption"]
    );
    assert_eq!(names(&p.plugins.bind), vec!["DefaultBinder"]);
}

#[test]
fn multiple_schedulers_v1beta2_loads_unchanged() {
    let c = ok(&testdata("multiple-schedulers-v1beta2.yaml"));
    assert_eq!(c.profiles[0].scheduler_name, "my-scheduler");
    assert!(!c.leader_election.leader_elect);
    // v1beta2's own default weights: PodTopologySpread 2, the others 1.
    let p = &c.profiles[0].plugins;
    let weights: Vec<(&str, i32)> = p
        .score
        .iter()
        .map(|r| (r.name.as_str(), r.weight))
        .collect();
    assert_eq!(
        weights,
        vec![
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
            ("InterPodAffinity", 1),
            ("NodeResourcesFit", 1),
            ("NodeAffinity", 1),
            ("PodTopologySpread", 2),
            ("TaintToleration", 1),
            ("PlacementPolicy", 17)
        ]
    );
    assert_eq!(names(&p.bind), vec!["DefaultBinder"]);
}

#[test]
fn extending_the_scheduler_configs_load_unchanged() {
    let c = ok(&testdata("extending-my-scheduler-v1.yaml"));
    assert_eq!(c.profiles[0].scheduler_name, "my-scheduler");
    let c = ok(&testdata("extending-extender-v1.yaml"));
    assert_eq!(c.profiles[0].scheduler_name, "my-scheduler-with-extender");
    let e = &c.extenders[0];
    assert_eq!(
        e.url_prefix,
        "http://my-scheduler-extender.kube-system.svc:8080"
    );
    assert_eq!(
        (
            e.filter_verb.as_deref(),
            e.prioritize_verb.as_deref(),
            e.bind_verb.as_deref()
        ),
        (Some("filter"), Some("prioritize"), Some("bind"))
    );
    assert_eq!(e.weight, 1);
    assert_eq!(
        e.http_timeout.as_secs(),
        5,
        "kube-scheduler's DefaultExtenderTimeout"
    );
    assert!(!e.node_cache_capable && !e.enable_https && !e.ignorable);
}

#[test]
fn kosmos_config_loads_with_the_leaf_node_plugins() {
    let c = ok(&testdata("kosmos-v1beta1.yaml"));
    let p = &c.profiles[0];
    assert_eq!(p.scheduler_name, "kosmos-scheduler");
    let names = |refs: &[PluginRef]| refs.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    let filter = names(&p.plugins.filter);
    assert!(
        filter.contains(&"LeafNodeTaintToleration".to_string()),
        "{filter:?}"
    );
    assert!(
        filter.contains(&"LeafNodeVolumeBinding".to_string()),
        "{filter:?}"
    );
    assert!(
        !filter.contains(&"TaintToleration".to_string()),
        "{filter:?}"
    );
    assert!(!filter.contains(&"VolumeBinding".to_string()), "{filter:?}");
    assert!(names(&p.plugins.reserve).contains(&"LeafNodeVolumeBinding".to_string()));
    assert!(names(&p.plugins.pre_bind).contains(&"LeafNodeVolumeBinding".to_string()));
    assert_eq!(p.args.leaf_volume_binding_timeout_seconds, 5);
    assert_eq!(c.leader_election.resource_name, "kosmos-scheduler");
}

#[test]
fn v1beta1_maps_legacy_plugins() {
    let c = ok(
        "apiVersion: kubescheduler.config.k8s.io/v1beta1\nkind: KubeSchedulerConfiguration\nhealthzBindAddress: 0.0.0.0:10251\n",
    );
    let p = &c.profiles[0].plugins;
    // NodeResourcesLeastAllocated became NodeResourcesFit's LeastAllocated scoring;
    // SelectorSpread and NodePreferAvoidPods are gone.
    assert!(names(&p.score).contains(&"NodeResourcesFit"));
    assert!(!names(&p.score).contains(&"SelectorSpread"));
    assert_eq!(
        c.profiles[0].args.node_resources_fit.strategy,
        ScoringStrategyType::LeastAllocated
    );
}

#[test]
fn multi_point_and_specific_points_merge_like_kube_scheduler() {
    let c = ok(&format!(
        "{V1}profiles:
- schedulerName: a
  plugins:
    multiPoint:
      disabled:
      - name: ImageLocality
      enabled:
      - name: TaintToleration
        weight: 7
    filter:
      disabled:
      - name: NodePorts
    score:
      enabled:
      - name: NodeResourcesBalancedAllocation
        weight: 9
"
    ));
    let p = &c.profiles[0].plugins;
    assert!(!names(&p.filter).contains(&"NodePorts"));
    assert!(!names(&p.score).contains(&"ImageLocality"));
    let w = |n: &str| p.score.iter().find(|r| r.name == n).map(|r| r.weight);
    assert_eq!(w("TaintToleration"), Some(7));
    assert_eq!(w("NodeResourcesBalancedAllocation"), Some(9));
    // A plugin enabled at a point comes first there.
    assert_eq!(p.score[0].name, "NodeResourcesBalancedAllocation");
}

#[test]
fn star_disables_every_default_of_a_point() {
    let c = ok(&format!(
        "{V1}profiles:
- plugins:
    score:
      disabled:
      - name: '*'
      enabled:
      - name: NodeResourcesFit
        weight: 5
"
    ));
    let score: Vec<(&str, i32)> = c.profiles[0]
        .plugins
        .score
        .iter()
        .map(|r| (r.name.as_str(), r.weight))
        .collect();
    assert_eq!(
        score,
        vec![("NodeResourcesFit", 5), ("PlacementPolicy", 11)]
    );
}

#[test]
fn plugin_args() {
    let c = ok(&format!(
        "{V1}profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy:
        type: RequestedToCapacityRatio
        resources:
        - name: cpu
          weight: 3
        requestedToCapacityRatio:
          shape:
          - utilization: 0
            score: 0
          - utilization: 100
            score: 10
  - name: DefaultPreemption
    args:
      minCandidateNodesPercentage: 20
"
    ));
    let a = &c.profiles[0].args;
    assert_eq!(
        a.node_resources_fit.strategy,
        ScoringStrategyType::RequestedToCapacityRatio
    );
    assert_eq!(a.node_resources_fit.shape, vec![(0, 0), (100, 10)]);
    assert_eq!(a.node_resources_fit.resources[0].weight, 3);
    assert_eq!(a.min_candidate_nodes_percentage, 20);
}

/// VolumeBindingArgs' shape (StorageCapacityScoring, on in v1.37): kept as given,
/// defaulted to (0, 10), (100, 0) when absent or empty (SetDefaults_VolumeBindingArgs
/// runs before validation), validated like kube's validateFunctionShape.
#[test]
fn volume_binding_shape_is_defaulted_and_kept() {
    let c = ok(&format!("{V1}profiles:\n- schedulerName: a\n"));
    assert_eq!(
        c.profiles[0].args.volume_binding_shape,
        vec![(0, 10), (100, 0)]
    );
    let c = ok(&format!(
        "{V1}profiles:
- pluginConfig:
  - name: VolumeBinding
    args:
      shape:
      - utilization: 0
        score: 0
      - utilization: 100
        score: 10
  - name: LeafNodeVolumeBinding
    args:
      shape: []
"
    ));
    let a = &c.profiles[0].args;
    assert_eq!(a.volume_binding_shape, vec![(0, 0), (100, 10)]);
    assert_eq!(a.leaf_volume_binding_shape, vec![(0, 10), (100, 0)]);
    let e = errors(&format!(
        "{V1}profiles:
- pluginConfig:
  - name: VolumeBinding
    args:
      shape:
      - utilization: 50
        score: 11
      - utilization: 40
        score: 0
"
    ));
    assert!(
        e.iter()
            .any(|m| m.contains("profiles[0].pluginConfig[0].args.shape[0].score")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|m| m.contains("profiles[0].pluginConfig[0].args.shape[1].utilization")),
        "{e:?}"
    );
}

/// DynamicResourcesArgs as v1.37 defaults and validates them: filterTimeout 10s (zero
/// allowed, negative not), bindingTimeout 600s (at least 1s).
#[test]
fn dynamic_resources_args_are_defaulted_and_validated() {
    use std::time::Duration;
    let c = ok(&format!("{V1}profiles:\n- schedulerName: a\n"));
    let a = &c.profiles[0].args;
    assert_eq!(a.dynamic_resources_filter_timeout, Duration::from_secs(10));
    assert_eq!(
        a.dynamic_resources_binding_timeout,
        Duration::from_secs(600)
    );
    let c = ok(&format!(
        "{V1}profiles:
- pluginConfig:
  - name: DynamicResources
    args:
      filterTimeout: 0s
      bindingTimeout: 1m30s
"
    ));
    let a = &c.profiles[0].args;
    assert_eq!(a.dynamic_resources_filter_timeout, Duration::ZERO);
    assert_eq!(a.dynamic_resources_binding_timeout, Duration::from_secs(90));
    let e = errors(&format!(
        "{V1}profiles:
- pluginConfig:
  - name: DynamicResources
    args:
      filterTimeout: -1s
      bindingTimeout: 500ms
"
    ));
    assert!(
        e.iter().any(|m| m
            == "profiles[0].pluginConfig[0].args.filterTimeout: Invalid value: \"-1s\": must be zero or positive"),
        "{e:?}"
    );
    assert!(
        e.iter().any(|m| m
            == "profiles[0].pluginConfig[0].args.bindingTimeout: Invalid value: \"500ms\": must be at least 1 second"),
        "{e:?}"
    );
    let e = errors(&format!(
        "{V1}profiles:
- pluginConfig:
  - name: DynamicResources
    args:
      filterTimeout: soon
"
    ));
    assert!(
        e.iter()
            .any(|m| m.starts_with("profiles[0].pluginConfig[0].args.filterTimeout: ")),
        "{e:?}"
    );
}

#[test]
fn errors_name_the_field() {
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{V1}profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: Foo\n"),
            "profiles[0].plugins.filter.enabled[0].name: unknown plugin \"Foo\"",
        ),
        (
            format!(
                "{V1}profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: ImageLocality\n"
            ),
            "profiles[0].plugins.filter.enabled[0].name: plugin \"ImageLocality\" does not implement the filter extension point",
        ),
        (format!("{V1}bogus: 1\n"), "bogus"),
        (
            format!("{V1}profiles:\n- schedulerName: a\n- schedulerName: a\n"),
            "profiles[1].schedulerName: Duplicate value: \"a\" (also profiles[0].schedulerName)",
        ),
        (
            format!("{V1}profiles:\n- schedulerName: ''\n"),
            "profiles[0].schedulerName: Required value: schedulerName must not be empty",
        ),
        (
            format!(
                "{V1}profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n      disabled:\n      - name: '*'\n"
            ),
            "profiles[1].plugins.queueSort: queueSort must be the same for all profiles",
        ),
        (
            format!(
                "{V1}profiles:\n- plugins:\n    score:\n      enabled:\n      - name: ImageLocality\n        weight: 0\n"
            ),
            "profiles[0].plugins.score.enabled[0].weight: score plugin weight must be positive, got 0",
        ),
        (
            format!(
                "{V1}extenders:\n- urlPrefix: http://a\n  bindVerb: bind\n- urlPrefix: http://b\n  bindVerb: bind\n"
            ),
            "extenders[1].bindVerb: only one extender can implement bind",
        ),
        (
            format!("{V1}parallelism: 0\n"),
            "parallelism: should be an integer value greater than zero, got 0",
        ),
        (
            format!("{V1}percentageOfNodesToScore: 101\n"),
            "percentageOfNodesToScore: not in valid range [0-100], got 101",
        ),
        (
            format!(
                "{V1}profiles:\n- pluginConfig:\n  - name: NodeAffinity\n    args:\n      addedAffinty: {{}}\n"
            ),
            "profiles[0].pluginConfig[0].args",
        ),
        (
            format!("{V1}leaderElection:\n  leaseDuration: 5s\n"),
            "leaderElection.leaseDuration: must be greater than renewDeadline",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v2\nkind: KubeSchedulerConfiguration\n".into(),
            "apiVersion: unsupported",
        ),
        (format!("{V1}profiles: [\n"), "line"),
    ];
    for (text, want) in cases {
        let errs = errors(&text);
        assert!(
            errs.iter().any(|e| e.starts_with(want) || e.contains(want)),
            "want {want:?} in {errs:#?}\nfor:\n{text}"
        );
    }
}

#[test]
fn client_connection_content_types() {
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    const JSON: &str = "application/json";
    let connection = |fields: &str| ok(&format!("{V1}{fields}")).client_connection;
    assert_eq!(connection("").response_content_type(), PROTOBUF);
    let c = connection("clientConnection:\n  contentType: application/json\n");
    assert_eq!(c.response_content_type(), JSON);
    // Requests in protobuf, answers asked for in JSON first.
    let c = connection(&format!(
        "clientConnection:\n  contentType: {PROTOBUF}\n  acceptContentTypes: {JSON}, {PROTOBUF}\n"
    ));
    assert_eq!(
        (c.content_type.as_str(), c.response_content_type()),
        (PROTOBUF, JSON)
    );
    let c = connection("clientConnection:\n  contentType: \"\"\n  acceptContentTypes: \"\"\n");
    assert_eq!(c.response_content_type(), PROTOBUF);
    let errs = errors(&format!(
        "{V1}clientConnection:\n  contentType: application/yaml\n  acceptContentTypes: application/json,,text/plain\n"
    ));
    let supported = format!("supported values: \"{PROTOBUF}\", \"{JSON}\"");
    assert_eq!(
        errs,
        vec![
            format!(
                "clientConnection.contentType: Unsupported value: \"application/yaml\": {supported}"
            ),
            "clientConnection.acceptContentTypes: empty entry in \"application/json,,text/plain\""
                .to_string(),
            format!(
                "clientConnection.acceptContentTypes: Unsupported value: \"text/plain\": {supported}"
            ),
        ]
    );
}

#[test]
fn malformed_yaml_gives_line_and_column() {
    let errs = errors(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n  - schedulerName: [\n",
    );
    assert!(errs[0].contains("line"), "{errs:?}");
}

#[test]
fn render_lists_points_and_weights() {
    let text = render_profiles(&ok(V1));
    assert!(text.contains("profile default-scheduler:"), "{text}");
    assert!(text.contains("queueSort:  PrioritySort"), "{text}");
    assert!(text.contains("TaintToleration(3)"), "{text}");
    assert!(text.contains("leaderElection: lease kube-system/kube-scheduler (leaseDuration 15s, renewDeadline 10s, retryPeriod 2s)"), "{text}");
}

#[test]
fn cluster_policy_args_load() {
    let c = ok(&testdata("cluster-policies-v1.yaml"));
    let profile = |name: &str| match c.profiles.iter().find(|p| p.scheduler_name == name) {
        Some(p) => p,
        None => panic!("no profile {name}"),
    };
    let w = &profile("mcsched-weights").args.cluster_weights;
    assert_eq!(
        w.weights,
        std::collections::BTreeMap::from([("east".to_string(), 1), ("west".to_string(), 2)])
    );
    assert_eq!(w.host_cluster_name, "host");
    let p = &profile("mcsched-weights").plugins;
    assert!(names(&p.pre_score).contains(&"ClusterWeights"));
    assert!(
        p.score
            .iter()
            .any(|r| r.name == "ClusterWeights" && r.weight == 50)
    );
    assert_eq!(
        profile("mcsched-capacity").args.cluster_capacity.mode,
        CapacityMode::Dynamic
    );
    let cost = profile("mcsched-cost").args.cluster_cost;
    assert_eq!((cost.host_cost, cost.default_cost), (10, 10));
    let tiers = &profile("mcsched-tiers").args.cluster_tiers.tiers;
    assert_eq!(tiers.len(), 3);
    assert_eq!(tiers[0], ClusterTier::Clusters(vec!["host".into()]));
    assert!(matches!(&tiers[1], ClusterTier::Selector(s)
        if s.match_labels.as_ref().and_then(|m| m.get("mcsched.io/provider")).map(String::as_str) == Some("onprem")));
    // Capacity's mode defaults to Dynamic; Aggregated is the other one.
    let c = ok(&format!(
        "{V1}profiles:\n- pluginConfig:\n  - name: ClusterCapacity\n    args:\n      mode: Aggregated\n  - name: ClusterCost\n"
    ));
    assert_eq!(
        c.profiles[0].args.cluster_capacity.mode,
        CapacityMode::Aggregated
    );
    assert_eq!(c.profiles[0].args.cluster_cost, ClusterCostArgs::default());
}

#[test]
fn cluster_policy_args_errors_name_the_field() {
    let args = |plugin: &str, body: &str| {
        format!("{V1}profiles:\n- pluginConfig:\n  - name: {plugin}\n    args:\n{body}")
    };
    let a = "profiles[0].pluginConfig[0].args";
    let cases: Vec<(String, String)> = vec![
        (
            args("ClusterWeights", "      weights:\n        west: -1\n        east: 1\n"),
            format!("{a}.weights[west]: Invalid value: -1: must be greater than or equal to 0"),
        ),
        (
            args("ClusterWeights", "      weights: {}\n"),
            format!("{a}.weights: Required value: at least one cluster and its weight"),
        ),
        (
            args("ClusterWeights", "      weights:\n        west: 0\n"),
            format!("{a}.weights: Invalid value: every weight is 0: at least one weight must be positive"),
        ),
        (
            args("ClusterWeights", "      weights:\n        -west: 1\n"),
            format!("{a}.weights[-west]: Invalid value: \"-west\": a cluster name must be"),
        ),
        (
            args("ClusterWeights", "      weights:\n        west: 1\n      hostClusterName: ''\n"),
            format!("{a}.hostClusterName: Invalid value: \"\""),
        ),
        (
            args("ClusterWeights", "      weight:\n        west: 1\n"),
            format!("{a}: unknown field `weight`"),
        ),
        (
            args("ClusterCapacity", "      mode: Greedy\n"),
            format!("{a}.mode: Unsupported value: \"Greedy\": supported values: \"Dynamic\", \"Aggregated\""),
        ),
        (
            args("ClusterCost", "      hostCost: -3\n"),
            format!("{a}.hostCost: Invalid value: -3: must be greater than or equal to 0"),
        ),
        (
            args("ClusterCost", "      defaultCost: -1\n"),
            format!("{a}.defaultCost: Invalid value: -1: must be greater than or equal to 0"),
        ),
        (
            args("ClusterTiers", "      tiers: []\n"),
            format!("{a}.tiers: Required value: at least one tier"),
        ),
        (
            args("ClusterTiers", "      tiers:\n      - {}\n"),
            format!("{a}.tiers[0]: Required value: a tier needs clusters or a selector"),
        ),
        (
            args(
                "ClusterTiers",
                "      tiers:\n      - clusters: [west]\n        selector: {}\n",
            ),
            format!("{a}.tiers[0].selector: Forbidden: a tier has either clusters or a selector, not both"),
        ),
        (
            args("ClusterTiers", "      tiers:\n      - clusters: []\n"),
            format!("{a}.tiers[0].clusters: Required value: at least one cluster name"),
        ),
        (
            args(
                "ClusterTiers",
                "      tiers:\n      - clusters: [host, west]\n      - clusters: [west]\n",
            ),
            format!("{a}.tiers[1].clusters[0]: Duplicate value: \"west\" (also {a}.tiers[0].clusters[1])"),
        ),
        (
            args(
                "ClusterTiers",
                "      tiers:\n      - selector:\n          matchExpressions:\n          - {key: zone, operator: Near, values: [a]}\n",
            ),
            format!("{a}.tiers[0].selector.matchExpressions[0].operator: Invalid value: \"Near\": not a valid selector operator"),
        ),
        (
            args(
                "ClusterTiers",
                "      tiers:\n      - selector:\n          matchExpressions:\n          - {key: zone, operator: In}\n",
            ),
            format!("{a}.tiers[0].selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"),
        ),
        (
            format!(
                "{V1}profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: ClusterWeights\n"
            ),
            "profiles[0].pluginConfig: Required value: ClusterWeights is enabled, so its args (weights) must be given".into(),
        ),
        (
            format!(
                "{V1}profiles:\n- plugins:\n    score:\n      enabled:\n      - name: ClusterTiers\n        weight: 5\n"
            ),
            "profiles[0].pluginConfig: Required value: ClusterTiers is enabled, so its args (tiers) must be given".into(),
        ),
        (
            format!(
                "{V1}profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: ClusterCost\n"
            ),
            "profiles[0].plugins.filter.enabled[0].name: plugin \"ClusterCost\" does not implement the filter extension point".into(),
        ),
    ];
    for (text, want) in cases {
        let errs = errors(&text);
        assert!(
            errs.iter().any(|e| e.starts_with(&want)),
            "want {want:?} in {errs:#?}\nfor:\n{text}"
        );
    }
}

#[test]
fn render_shows_cluster_policy_args() {
    let text = render_profiles(&ok(&testdata("cluster-policies-v1.yaml")));
    for want in [
        "ClusterWeights(50)",
        "args:       ClusterWeights: weights east=1, west=2; hostClusterName host",
        "args:       ClusterCapacity: mode Dynamic",
        "args:       ClusterCost: hostCost 10; defaultCost 10",
        "args:       ClusterTiers: tiers 1: clusters host; 2: selector mcsched.io/provider=onprem; 3: clusters east",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
}

/// The pod group cycle's points as kube-scheduler v1.37 fills them by default: the
/// multiPoint plugins that implement them, and TopologyAwareWorkloadScheduling's two
/// under that gate.
#[test]
fn pod_group_points_default_like_kube_scheduler_v1_37() {
    let c = ok(&format!("{V1}profiles:\n- schedulerName: a\n"));
    let p = &c.profiles[0].plugins;
    assert!(p.placement_generate.is_empty());
    assert_eq!(
        p.placement_score,
        vec![PluginRef {
            name: "NodeResourcesFit".into(),
            weight: 1
        }]
    );
    assert_eq!(
        names(&p.pod_group_post_filter),
        vec!["DynamicResources", "DefaultPreemption"]
    );
    let gates = feature_gates::FeatureGates::parse(
        "GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
    )
    .expect("gates");
    let c = load_with(&format!("{V1}profiles:\n- schedulerName: a\n"), &gates).expect("loads");
    let p = &c.profiles[0].plugins;
    assert_eq!(
        names(&p.placement_generate),
        vec!["TopologyPlacementGenerator"]
    );
    let weights: Vec<(&str, i32)> = (p.placement_score.iter())
        .map(|r| (r.name.as_str(), r.weight))
        .collect();
    assert_eq!(weights, [("NodeResourcesFit", 1), ("PodGroupPodsCount", 1)]);
    // Not a score, filter or any other point's plugin.
    assert!(!names(&p.score).contains(&"PodGroupPodsCount"));
}

#[test]
fn pod_group_points_are_configured_like_the_others() {
    let c = ok(&format!(
        "{V1}profiles:
- schedulerName: a
  plugins:
    podGroupPostFilter:
      disabled:
      - name: DefaultPreemption
    placementScore:
      enabled:
      - name: NodeResourcesFit
        weight: 5
    placementGenerate:
      enabled:
      - name: TopologyPlacementGenerator
"
    ));
    let p = &c.profiles[0].plugins;
    assert_eq!(names(&p.pod_group_post_filter), vec!["DynamicResources"]);
    assert_eq!(p.placement_score[0].weight, 5);
    assert_eq!(
        names(&p.placement_generate),
        vec!["TopologyPlacementGenerator"]
    );
    // Disabling a plugin at PostFilter leaves it at PodGroupPostFilter, as in kube.
    let c = ok(&format!(
        "{V1}profiles:\n- schedulerName: a\n  plugins:\n    postFilter:\n      disabled:\n      - name: DefaultPreemption\n"
    ));
    let p = &c.profiles[0].plugins;
    assert_eq!(names(&p.post_filter), vec!["DynamicResources"]);
    assert!(names(&p.pod_group_post_filter).contains(&"DefaultPreemption"));
}

#[test]
fn pod_group_points_errors_name_the_field() {
    let e = errors(&format!(
        "{V1}profiles:
- schedulerName: a
  plugins:
    podGroupPostFilter:
      enabled:
      - name: NodeName
    placementScore:
      enabled:
      - name: PodGroupPodsCount
        weight: 0
"
    ));
    assert_eq!(
        e,
        vec![
            "profiles[0].plugins.podGroupPostFilter.enabled[0].name: plugin \"NodeName\" does not implement the podGroupPostFilter extension point",
            "profiles[0].plugins.placementScore.enabled[0].weight: score plugin weight must be positive, got 0",
        ]
    );
    let e = errors(
        "apiVersion: kubescheduler.config.k8s.io/v1beta3
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: a
  plugins:
    placementScore:
      enabled:
      - name: NodeResourcesFit
",
    );
    assert_eq!(
        e,
        vec![
            "profiles[0].plugins.placementScore: not a field of kubescheduler.config.k8s.io/v1beta3"
        ]
    );
}

/// kube-scheduler profiles by default; `enableProfiling: false` turns the endpoint off,
/// and `enableContentionProfiling` is accepted either way.
#[test]
fn enable_profiling_defaults_to_true_as_kubes() {
    assert!(ok(V1).enable_profiling);
    assert!(!ok(&format!("{V1}enableProfiling: false\n")).enable_profiling);
    let c = ok(&format!(
        "{V1}enableProfiling: true\nenableContentionProfiling: true\n"
    ));
    assert!(c.enable_profiling);
}
