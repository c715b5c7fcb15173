//! Property tests: whatever a user or the network hands the decoders — configuration
//! files, durations, quantities, leaf kubeconfigs — they answer with a value or an error
//! that says something, and never panic. Bounded to 256 cases each, for `make test`.

use mcsched_shared::config;
use mcsched_shared::config::duration;
use mcsched_shared::leaf_kubeconfig;
use mcsched_shared::quantity::Quantity;
use proptest::prelude::*;

/// Text that looks like what each field takes, often enough, and like nothing at all.
fn duration_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,25}(ns|us|µs|ms|s|m|h)",
        "-?[0-9]{0,6}(\\.[0-9]{0,12})?(ns|us|ms|s|m|h){0,3}",
        "[0-9hms.\\-+]{0,30}",
        ".{0,20}",
    ]
}

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        "-?[0-9]{1,40}(\\.[0-9]{1,10})?",
        Just("1e400".to_string()),
        Just("-0".to_string()),
        Just("NaN".to_string()),
        Just(".inf".to_string()),
    ]
}

fn plugin_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("NodeResourcesFit".to_string()),
        Just("PodTopologySpread".to_string()),
        Just("InterPodAffinity".to_string()),
        Just("DefaultPreemption".to_string()),
        Just("ClusterWeights".to_string()),
        Just("ClusterTiers".to_string()),
        "[A-Za-z*]{0,20}",
    ]
}

/// A KubeSchedulerConfiguration with every value drawn from the strategies above.
fn configuration() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just("kubescheduler.config.k8s.io/v1"),
            Just("kubescheduler.config.k8s.io/v1beta3"),
            Just("kubescheduler.config.k8s.io/v1beta1"),
            Just("v1"),
        ],
        duration_text(),
        duration_text(),
        number_text(),
        number_text(),
        number_text(),
        plugin_name(),
        plugin_name(),
        number_text(),
        "[a-z\\-]{0,12}",
    )
        .prop_map(
            |(api, lease, renew, qps, burst, pct, enabled, configured, weight, name)| {
                format!(
                    "apiVersion: {api}
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  leaseDuration: {lease}
  renewDeadline: {renew}
  retryPeriod: {renew}
clientConnection:
  qps: {qps}
  burst: {burst}
percentageOfNodesToScore: {pct}
podInitialBackoffSeconds: {burst}
podMaxBackoffSeconds: {pct}
profiles:
- schedulerName: {name}
  plugins:
    score:
      enabled:
      - name: {enabled}
        weight: {weight}
  pluginConfig:
  - name: {configured}
    args:
      hardPodAffinityWeight: {weight}
      scoringStrategy:
        type: LeastAllocated
        resources: [{{name: cpu, weight: {weight}}}]
      defaultConstraints:
      - maxSkew: {weight}
        topologyKey: zone
        whenUnsatisfiable: DoNotSchedule
      weights: {{host: {weight}, east: {qps}}}
extenders:
- urlPrefix: http://127.0.0.1:{burst}
  filterVerb: filter
  weight: {weight}
  httpTimeout: {lease}
"
                )
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_configuration_decodes_or_names_its_problem(text in configuration()) {
        if let Err(errors) = config::load(&text) {
            prop_assert!(!errors.to_string().trim().is_empty());
        }
    }

    #[test]
    fn any_text_as_a_configuration_never_panics(text in ".{0,400}") {
        let _ = config::load(&text);
    }

    #[test]
    fn durations_parse_or_fail_cleanly(text in duration_text()) {
        if let Err(e) = duration::parse(&text) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn whole_seconds_read_back_exactly(secs in 0u64..9_000_000_000) {
        let parsed = duration::parse(&format!("{secs}s"));
        prop_assert_eq!(parsed, Ok(std::time::Duration::from_secs(secs)));
    }

    #[test]
    fn quantities_parse_or_fail_cleanly(
        text in prop_oneof![
            "-?[0-9]{0,30}(\\.[0-9]{0,30})?(e-?[0-9]{1,4}|E[0-9]{1,3})?(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?",
            ".{0,24}",
        ]
    ) {
        if let Ok(q) = Quantity::parse(&text) {
            // Conversions saturate instead of overflowing.
            let _ = (q.value(), q.milli_value());
        }
    }

    #[test]
    fn leaf_kubeconfigs_are_checked_without_panicking(
        text in prop_oneof![
            ".{0,300}",
            ("[a-z\\-]{1,24}", "[a-zA-Z0-9\\-]{0,40}").prop_map(|(field, value)| format!(
                "clusters:\n- name: c\n  cluster:\n    server: https://h\n    certificate-authority-data: Q0E=\n    {field}: {value}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\n"
            )),
        ]
    ) {
        match leaf_kubeconfig::check(&text) {
            Ok(()) => prop_assert!(leaf_kubeconfig::token(&text).is_some()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
