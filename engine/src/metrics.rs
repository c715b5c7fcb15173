//! kube-scheduler v1.37's metrics under its names, labels, buckets and help (with its
//! stability levels), client-go's rest_client_* and leader election's, and the Prometheus
//! process collector's: every name the kubernetes-mixin's scheduler dashboard and alerts
//! read (tests/data/kubernetes-mixin-scheduler-metrics.txt, checked against a real agent
//! by tests/tests/dashboard_metrics.rs) but Go's go_goroutines, whose panel stays empty.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod process;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AttemptLabels {
    pub(crate) result: String,
    pub(crate) profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct QueueLabels {
    pub(crate) queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct IncomingLabels {
    pub(crate) queue: String,
    pub(crate) event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ExtensionPointLabels {
    pub(crate) extension_point: String,
    pub(crate) status: String,
    pub(crate) profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PluginLabels {
    pub(crate) plugin: String,
    pub(crate) extension_point: String,
    pub(crate) status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EvaluationLabels {
    pub(crate) plugin: String,
    pub(crate) extension_point: String,
    pub(crate) profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PluginProfileLabels {
    pub(crate) plugin: String,
    pub(crate) profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AttemptsLabels {
    pub(crate) attempts: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabels {
    pub(crate) result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResourceLabels {
    pub(crate) resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterLabels {
    pub(crate) cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PanicLabels {
    pub(crate) point: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClusterKindLabels {
    pub(crate) cluster: String,
    pub(crate) kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LeafCopyLabels {
    pub(crate) cluster: String,
    pub(crate) kind: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

// The labels below are in kube's printed order: client_golang sorts label names.

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RestResultLabels {
    pub(crate) code: String,
    pub(crate) host: String,
    pub(crate) method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RestLatencyLabels {
    pub(crate) host: String,
    pub(crate) verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NameLabels {
    pub(crate) name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TypeLabels {
    pub(crate) r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EventLabels {
    pub(crate) event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PreemptorLabels {
    pub(crate) preemptor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PreemptorResultLabels {
    pub(crate) preemptor: String,
    pub(crate) result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProfileLabels {
    pub(crate) profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProfileResultLabels {
    pub(crate) profile: String,
    pub(crate) result: String,
}

/// client-go's rest_client_request_duration_seconds buckets (component-base's
/// prometheus/restclient).
const REST_CLIENT_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// By profile (a handful), then (extension point, plugin).
type EvaluationCounters = Vec<(String, HashMap<(&'static str, &'static str), Counter>)>;

pub struct Metrics {
    pub(crate) schedule_attempts: Family<AttemptLabels, Counter>,
    pub(crate) attempt_duration: Family<AttemptLabels, Histogram>,
    pub(crate) pod_group_attempts: Family<AttemptLabels, Counter>,
    pub(crate) pod_group_attempt_duration: Family<AttemptLabels, Histogram>,
    pub pod_group_algorithm_duration: Histogram,
    pub(crate) pending_pods: Family<QueueLabels, Gauge>,
    pub(crate) queue_incoming: Family<IncomingLabels, Counter>,
    pub(crate) extension_point_duration: Family<ExtensionPointLabels, Histogram>,
    pub(crate) plugin_duration: Family<PluginLabels, Histogram>,
    pub(crate) plugin_evaluations: Family<EvaluationLabels, Counter>,
    pub preemption_attempts: Counter,
    pub preemption_victims: Histogram,
    pub(crate) pod_scheduling_attempts: Histogram,
    pub(crate) pod_scheduling_sli_duration: Family<AttemptsLabels, Histogram>,
    pub(crate) unschedulable_pods: Family<PluginProfileLabels, Gauge>,
    pub(crate) permit_wait_duration: Family<ResultLabels, Histogram>,
    pub(crate) scheduling_algorithm_duration: Histogram,
    pub(crate) event_handling_duration: Family<EventLabels, Histogram>,
    pub(crate) cache_size: Family<TypeLabels, Gauge>,
    pub(crate) workload_preemption_attempts: Family<ResultLabels, Counter>,
    pub(crate) workload_preemption_victims: Histogram,
    pub(crate) preemption_workload_disruptions: Family<PreemptorLabels, Histogram>,
    pub(crate) preemption_evaluation_duration: Family<PreemptorResultLabels, Histogram>,
    pub(crate) preemption_pdb_violations: Family<PreemptorLabels, Counter>,
    pub(crate) generated_placements: Family<ProfileLabels, Counter>,
    pub(crate) placement_evaluations: Family<ProfileResultLabels, Counter>,
    pub(crate) placement_evaluation_duration: Family<ProfileResultLabels, Histogram>,
    pub(crate) rest_requests: Family<RestResultLabels, Counter>,
    pub(crate) rest_request_duration: Family<RestLatencyLabels, Histogram>,
    pub(crate) leader_status: Family<NameLabels, Gauge>,
    pub(crate) watch_restarts: Family<ResourceLabels, Counter>,
    pub(crate) watch_relists: Family<ResourceLabels, Counter>,
    pub(crate) watch_expired: Family<ResourceLabels, Counter>,
    pub(crate) refused_connections: Counter,
    pub(crate) throttled_authentications: Counter,
    pub(crate) leaf_check_dropped: Family<ClusterLabels, Counter>,
    pub(crate) leaf_check_evicted: Family<ClusterLabels, Counter>,
    pub(crate) leaf_forged_copies: Family<ClusterLabels, Counter>,
    pub(crate) recovered_panics: Family<PanicLabels, Counter>,
    pub(crate) read_access_dropped: Counter,
    pub(crate) read_access_evicted: Counter,
    pub(crate) leaf_copy_failures: Family<ClusterKindLabels, Counter>,
    /// One series per copy failing now, dropped once it is in step: bounded by the
    /// objects failing, not by all the copies.
    pub(crate) leaf_copies_failing: Family<LeafCopyLabels, Gauge>,
    /// plugin_evaluations' counters by profile, then (extension point, plugin).
    evaluation_counters: Mutex<EvaluationCounters>,
    /// The unschedulable_pods labels set last, to zero those that empty.
    unschedulable_labels: Mutex<Vec<PluginProfileLabels>>,
    registry: Registry,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let schedule_attempts = Family::<AttemptLabels, Counter>::default();
        // The names below carry kube-scheduler's "scheduler_" prefix themselves.
        kube(
            &mut registry,
            "scheduler_schedule_attempts",
            Stability::Stable,
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            &schedule_attempts,
        );
        let attempt_duration = Family::<AttemptLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 15))
        });
        kube(
            &mut registry,
            "scheduler_scheduling_attempt_duration_seconds",
            Stability::Stable,
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            &attempt_duration,
        );
        let pod_group_attempts = Family::<AttemptLabels, Counter>::default();
        kube(
            &mut registry,
            "scheduler_podgroup_schedule_attempts",
            Stability::Alpha,
            "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be scheduled, while 'error' means an internal scheduler problem.",
            &pod_group_attempts,
        );
        let pod_group_attempt_duration =
            Family::<AttemptLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            });
        kube(
            &mut registry,
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            Stability::Alpha,
            "Pod group scheduling attempt latency in seconds",
            &pod_group_attempt_duration,
        );
        let pod_group_algorithm_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        kube(
            &mut registry,
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            Stability::Alpha,
            "Pod group scheduling algorithm latency in seconds",
            &pod_group_algorithm_duration,
        );
        let pending_pods = Family::<QueueLabels, Gauge>::default();
        kube(
            &mut registry,
            "scheduler_pending_pods",
            Stability::Stable,
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulableEntities that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated; 'incomplete' means number of pods in incompletePodGroupPods; 'pending' means number of pods in pendingPodGroupPods.",
            &pending_pods,
        );
        let queue_incoming = Family::<IncomingLabels, Counter>::default();
        kube(
            &mut registry,
            "scheduler_queue_incoming_pods",
            Stability::Stable,
            "Number of pods added to scheduling queues by event and queue type.",
            &queue_incoming,
        );
        let extension_point_duration =
            Family::<ExtensionPointLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 12))
            });
        kube(
            &mut registry,
            "scheduler_framework_extension_point_duration_seconds",
            Stability::Stable,
            "Latency for running all plugins of a specific extension point.",
            &extension_point_duration,
        );
        let plugin_duration = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00001, 1.5, 20))
        });
        kube(
            &mut registry,
            "scheduler_plugin_execution_duration_seconds",
            Stability::Beta,
            "Duration for running a plugin at a specific extension point.",
            &plugin_duration,
        );
        let plugin_evaluations = Family::<EvaluationLabels, Counter>::default();
        kube(
            &mut registry,
            "scheduler_plugin_evaluation",
            Stability::Beta,
            "Number of attempts to schedule pods by each plugin and the extension point (available only in PreFilter, Filter, PreScore, and Score).",
            &plugin_evaluations,
        );
        let preemption_attempts = Counter::default();
        kube(
            &mut registry,
            "scheduler_preemption_attempts",
            Stability::Stable,
            "Total preemption attempts in the cluster till now",
            &preemption_attempts,
        );
        // kube's buckets: 64 victims or more is rare enough for one bucket.
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        kube(
            &mut registry,
            "scheduler_preemption_victims",
            Stability::Stable,
            "Number of selected preemption victims for preemption initiated by a single pod",
            &preemption_victims,
        );
        let pod_scheduling_attempts = Histogram::new(exponential_buckets(1.0, 2.0, 5));
        kube(
            &mut registry,
            "scheduler_pod_scheduling_attempts",
            Stability::Stable,
            "Number of attempts to successfully schedule a pod.",
            &pod_scheduling_attempts,
        );
        // From 10 ms to the last bucket's [~88 min, +Inf), as kube's.
        let pod_scheduling_sli_duration =
            Family::<AttemptsLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 2.0, 20))
            });
        kube(
            &mut registry,
            "scheduler_pod_scheduling_sli_duration_seconds",
            Stability::Beta,
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
            &pod_scheduling_sli_duration,
        );
        let unschedulable_pods = Family::<PluginProfileLabels, Gauge>::default();
        kube(
            &mut registry,
            "scheduler_unschedulable_pods",
            Stability::Beta,
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
            &unschedulable_pods,
        );
        let permit_wait_duration = Family::<ResultLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 15))
        });
        kube(
            &mut registry,
            "scheduler_permit_wait_duration_seconds",
            Stability::Beta,
            "Duration of waiting on permit.",
            &permit_wait_duration,
        );
        let scheduling_algorithm_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        kube(
            &mut registry,
            "scheduler_scheduling_algorithm_duration_seconds",
            Stability::Beta,
            "Scheduling algorithm latency in seconds",
            &scheduling_algorithm_duration,
        );
        // From 0.1 ms to the last bucket's [~200 ms, +Inf), as kube's.
        let event_handling_duration =
            Family::<EventLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 12))
            });
        kube(
            &mut registry,
            "scheduler_event_handling_duration_seconds",
            Stability::Alpha,
            "Event handling latency in seconds.",
            &event_handling_duration,
        );
        let cache_size = Family::<TypeLabels, Gauge>::default();
        kube(
            &mut registry,
            "scheduler_cache_size",
            Stability::Alpha,
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            &cache_size,
        );
        let workload_preemption_attempts = Family::<ResultLabels, Counter>::default();
        kube(
            &mut registry,
            "scheduler_workload_preemption_attempts",
            Stability::Alpha,
            "Total preemption attempts initiated by workload (including pod groups) in the cluster till now.",
            &workload_preemption_attempts,
        );
        // From 1 to the last bucket's [1024, +Inf), as kube's.
        let workload_preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 11));
        kube(
            &mut registry,
            "scheduler_workload_preemption_victims",
            Stability::Alpha,
            "Number of pod preemption victims caused by workload preemption.",
            &workload_preemption_victims,
        );
        let preemption_workload_disruptions =
            Family::<PreemptorLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1.0, 2.0, 11))
            });
        kube(
            &mut registry,
            "scheduler_preemption_workload_disruptions",
            Stability::Alpha,
            "Number of workload preemption units being preempted. A single preemption unit can be all pods in a pod group (in case of DisruptionMode=all), or a single pod (in case of DisruptionMode=single).",
            &preemption_workload_disruptions,
        );
        // From 1 ms to the last bucket's [~32.8 s, +Inf), as kube's.
        let preemption_evaluation_duration =
            Family::<PreemptorResultLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            });
        kube(
            &mut registry,
            "scheduler_preemption_evaluation_duration_seconds",
            Stability::Alpha,
            "Duration in seconds for identifying the target preemption victims.",
            &preemption_evaluation_duration,
        );
        let preemption_pdb_violations = Family::<PreemptorLabels, Counter>::default();
        kube(
            &mut registry,
            "scheduler_preemption_pdb_violations",
            Stability::Alpha,
            "Total number of pod disruption budget violations caused by preemption.",
            &preemption_pdb_violations,
        );
        let generated_placements = Family::<ProfileLabels, Counter>::default();
        kube(
            &mut registry,
            "scheduler_generated_placements",
            Stability::Alpha,
            "Number of candidate placements generated when scheduling pod groups.",
            &generated_placements,
        );
        let placement_evaluations = Family::<ProfileResultLabels, Counter>::default();
        kube(
            &mut registry,
            "scheduler_placement_evaluations",
            Stability::Alpha,
            "Number of candidate placements evaluated when scheduling pod groups, by result. 'feasible' means the pod group fit into the placement, while 'infeasible' means it did not.",
            &placement_evaluations,
        );
        let placement_evaluation_duration =
            Family::<ProfileResultLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            });
        kube(
            &mut registry,
            "scheduler_placement_evaluation_duration_seconds",
            Stability::Alpha,
            "Latency in seconds of evaluating a single candidate placement when scheduling pod groups, by result. 'feasible' means the pod group fit into the placement, while 'infeasible' means it did not.",
            &placement_evaluation_duration,
        );
        // client-go's, as component-base registers them for every Kubernetes component.
        let rest_requests = Family::<RestResultLabels, Counter>::default();
        kube(
            &mut registry,
            "rest_client_requests",
            Stability::Alpha,
            "Number of HTTP requests, partitioned by status code, method, and host.",
            &rest_requests,
        );
        let rest_request_duration =
            Family::<RestLatencyLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(REST_CLIENT_BUCKETS)
            });
        kube(
            &mut registry,
            "rest_client_request_duration_seconds",
            Stability::Alpha,
            "Request latency in seconds. Broken down by verb, and host.",
            &rest_request_duration,
        );
        let leader_status = Family::<NameLabels, Gauge>::default();
        kube(
            &mut registry,
            "leader_election_master_status",
            Stability::Alpha,
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            &leader_status,
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        // mcsched's own: kube-scheduler's informers have no such counter.
        let watch_restarts = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "mcsched_watch_restarts",
            "Restarts of a watch whose stream ended or whose change handling failed, by resource.",
            watch_restarts.clone(),
        );
        let watch_relists = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "mcsched_watch_relists",
            "Lists of a resource after its watch's first: the watch's resource version had expired (410 Gone) or the watch restarted.",
            watch_relists.clone(),
        );
        let watch_expired = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "mcsched_watch_expired",
            "Watches the API server answered 410 Gone (their resource version compacted away or older than its watch cache), each followed by a relist.",
            watch_expired.clone(),
        );
        let refused_connections = Counter::default();
        registry.register(
            "mcsched_secure_port_refused_connections",
            "Connections to the secure port closed at once: its connection limit (in all or per client address) was reached.",
            refused_connections.clone(),
        );
        let throttled_authentications = Counter::default();
        registry.register(
            "mcsched_secure_port_throttled_authentications",
            "Bearer tokens answered 429 without a TokenReview: too many failed authentications from the client's address or in all.",
            throttled_authentications.clone(),
        );
        let leaf_check_dropped = Family::<ClusterLabels, Counter>::default();
        registry.register(
            "mcsched_leaf_check_questions_dropped",
            "Questions for a leaf (a namespace's grant, an object's name) not queued because its queue was full; they are asked at the next 30s tick if still remembered.",
            leaf_check_dropped.clone(),
        );
        let leaf_check_evicted = Family::<ClusterLabels, Counter>::default();
        registry.register(
            "mcsched_leaf_check_entries_evicted",
            "Answers of a leaf forgotten before their time to make room for new questions, what-ifs' first, then the least recently wanted.",
            leaf_check_evicted.clone(),
        );
        let leaf_forged_copies = Family::<ClusterLabels, Counter>::default();
        registry.register(
            "mcsched_leaf_forged_copies",
            "Leaf pods found carrying this host's marks under a host pod's name but not the UID recorded for its copy (each counted once): neither adopted, deleted nor read into the host pod.",
            leaf_forged_copies.clone(),
        );
        let recovered_panics = Family::<PanicLabels, Counter>::default();
        registry.register(
            "mcsched_recovered_panics",
            "Panics caught at a pod's attempt (point: scheduling, pod_group, binding, pod_sync, what_if): the attempt failed and the agent went on. Any is a bug to report.",
            recovered_panics.clone(),
        );
        let read_access_dropped = Counter::default();
        registry.register(
            "mcsched_read_access_questions_dropped",
            "SelfSubjectAccessReviews of the host (may the agent read a namespace's ConfigMaps or Secrets) not queued because the queue was full.",
            read_access_dropped.clone(),
        );
        let read_access_evicted = Counter::default();
        registry.register(
            "mcsched_read_access_entries_evicted",
            "Host read-access answers forgotten before their time to make room, the least recently wanted first.",
            read_access_evicted.clone(),
        );
        let leaf_copy_failures = Family::<ClusterKindLabels, Counter>::default();
        registry.register(
            "mcsched_leaf_copy_failures",
            "Failed attempts to keep a leaf's copy of a host ConfigMap or Secret in step, or to delete a copy (or claim, or account) no leaf pod refers to any more; each copy retries after its own back-off, the others go on.",
            leaf_copy_failures.clone(),
        );
        let leaf_copies_failing = Family::<LeafCopyLabels, Gauge>::default();
        registry.register(
            "mcsched_leaf_copy_consecutive_failures",
            "For each leaf copy failing now, by the object's kind, namespace and name: how many attempts in a row failed. The series goes once the copy is in step again or forgotten.",
            leaf_copies_failing.clone(),
        );
        Metrics {
            scheduling_algorithm_duration,
            event_handling_duration,
            cache_size,
            workload_preemption_attempts,
            workload_preemption_victims,
            preemption_workload_disruptions,
            preemption_evaluation_duration,
            preemption_pdb_violations,
            generated_placements,
            placement_evaluations,
            placement_evaluation_duration,
            rest_requests,
            rest_request_duration,
            leader_status,
            leaf_copy_failures,
            leaf_copies_failing,
            leaf_check_dropped,
            leaf_check_evicted,
            leaf_forged_copies,
            recovered_panics,
            read_access_dropped,
            read_access_evicted,
            watch_restarts,
            watch_relists,
            watch_expired,
            refused_connections,
            throttled_authentications,
            unschedulable_labels: Mutex::default(),
            evaluation_counters: Mutex::default(),
            permit_wait_duration,
            schedule_attempts,
            attempt_duration,
            pod_group_attempts,
            pod_group_attempt_duration,
            pod_group_algorithm_duration,
            pending_pods,
            queue_incoming,
            extension_point_duration,
            plugin_duration,
            plugin_evaluations,
            preemption_attempts,
            preemption_victims,
            pod_scheduling_attempts,
            pod_scheduling_sli_duration,
            unschedulable_pods,
            registry,
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    pub fn connection_refused(&self) {
        self.refused_connections.inc();
    }

    pub fn authentication_throttled(&self) {
        self.throttled_authentications.inc();
    }

    /// The drop and eviction counters of `cluster`'s leaf checks.
    pub fn leaf_check_counters(&self, cluster: &str) -> (Counter, Counter) {
        let labels = ClusterLabels {
            cluster: cluster.into(),
        };
        (
            self.leaf_check_dropped.get_or_create(&labels).clone(),
            self.leaf_check_evicted.get_or_create(&labels).clone(),
        )
    }

    /// A forged copy found in leaf `cluster`.
    pub fn leaf_forged_copy(&self, cluster: &str) {
        self.leaf_forged_copies
            .get_or_create(&ClusterLabels {
                cluster: cluster.into(),
            })
            .inc();
    }

    /// A panic at `point` was caught: that attempt failed, the agent went on.
    pub fn recovered_panic(&self, point: &str) {
        self.recovered_panics
            .get_or_create(&PanicLabels {
                point: point.into(),
            })
            .inc();
    }

    /// Keeping leaf `cluster`'s copy `kind` `namespace/name` in step failed, `consecutive`
    /// times in a row now.
    pub fn leaf_copy_failed(
        &self,
        cluster: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        consecutive: u32,
    ) {
        self.leaf_copy_failures
            .get_or_create(&ClusterKindLabels {
                cluster: cluster.into(),
                kind: kind.into(),
            })
            .inc();
        self.leaf_copies_failing
            .get_or_create(&LeafCopyLabels {
                cluster: cluster.into(),
                kind: kind.into(),
                namespace: namespace.into(),
                name: name.into(),
            })
            .set(i64::from(consecutive));
    }

    /// Leaf `cluster`'s copy is in step again, or no longer kept.
    pub fn leaf_copy_recovered(&self, cluster: &str, kind: &str, namespace: &str, name: &str) {
        self.leaf_copies_failing.remove(&LeafCopyLabels {
            cluster: cluster.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        });
    }

    pub fn watch_relist(&self, resource: &str) {
        self.watch_relists
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    pub fn watch_expired(&self, resource: &str) {
        self.watch_expired
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    pub fn watch_restart(&self, resource: &str) {
        self.watch_restarts
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    pub fn attempt(&self, result: &str, profile: &str, seconds: f64) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.schedule_attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// One pod group cycle's result (scheduled, unschedulable, error).
    pub fn pod_group_attempt(&self, result: &str, profile: &str, seconds: f64) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.pod_group_attempts.get_or_create(&labels).inc();
        self.pod_group_attempt_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    pub fn extension_point(&self, point: &str, status: &str, profile: &str, seconds: f64) {
        self.extension_point_duration
            .get_or_create(&ExtensionPointLabels {
                extension_point: point.into(),
                status: status.into(),
                profile: profile.into(),
            })
            .observe(seconds);
    }

    pub(crate) fn plugin(&self, plugin: &str, point: &str, status: &str, seconds: f64) {
        self.plugin_many(plugin, point, status, &[seconds]);
    }

    /// Several calls of one plugin at one point with one status, under one label lookup.
    pub(crate) fn plugin_many(&self, plugin: &str, point: &str, status: &str, seconds: &[f64]) {
        let histogram = self.plugin_duration.get_or_create(&PluginLabels {
            plugin: plugin.into(),
            extension_point: point.into(),
            status: status.into(),
        });
        for s in seconds {
            histogram.observe(*s);
        }
    }

    /// How long a pod waited on Permit, by the verdict's code.
    pub(crate) fn permit_wait(&self, result: &str, waited: std::time::Duration) {
        self.permit_wait_duration
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .observe(waited.as_secs_f64());
    }

    pub(crate) fn incoming(&self, queue: &str, event: &str) {
        self.queue_incoming
            .get_or_create(&IncomingLabels {
                queue: queue.into(),
                event: event.into(),
            })
            .inc();
    }

    /// A scheduling cycle's plugin calls: (extension point, plugin, calls). The series'
    /// counters are kept by name, so a cycle adds to them without building labels.
    pub fn plugin_evaluations(&self, calls: &[(&'static str, &'static str, u64)], profile: &str) {
        let mut by_profile = self
            .evaluation_counters
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let at = match by_profile.iter().position(|(p, _)| p == profile) {
            Some(at) => at,
            None => {
                by_profile.push((profile.to_string(), HashMap::new()));
                by_profile.len() - 1
            }
        };
        let counters = &mut by_profile[at].1;
        for &(point, plugin, n) in calls {
            counters
                .entry((point, plugin))
                .or_insert_with(|| {
                    self.plugin_evaluations
                        .get_or_create(&EvaluationLabels {
                            plugin: plugin.into(),
                            extension_point: point.into(),
                            profile: profile.into(),
                        })
                        .clone()
                })
                .inc_by(n);
        }
    }

    /// A pod bound after `attempts` scheduling attempts, the first `since_first` ago.
    pub fn pod_scheduled(&self, attempts: u32, since_first: Option<std::time::Duration>) {
        self.pod_scheduling_attempts.observe(f64::from(attempts));
        if let Some(d) = since_first {
            self.pod_scheduling_sli_duration
                .get_or_create(&AttemptsLabels {
                    attempts: attempts_label(attempts),
                })
                .observe(d.as_secs_f64());
        }
    }

    /// The pods waiting after a rejection (or held by a PreEnqueue plugin), counted once
    /// under each plugin that rejected them; labels counted before and absent now drop to 0.
    pub fn set_unschedulable(&self, counts: &HashMap<(&str, String), usize>) {
        let mut seen = self
            .unschedulable_labels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for labels in seen.iter() {
            if !counts.contains_key(&(labels.plugin.as_str(), labels.profile.clone())) {
                self.unschedulable_pods.get_or_create(labels).set(0);
            }
        }
        seen.clear();
        for ((plugin, profile), n) in counts {
            let labels = PluginProfileLabels {
                plugin: (*plugin).into(),
                profile: profile.clone(),
            };
            self.unschedulable_pods
                .get_or_create(&labels)
                .set(*n as i64);
            seen.push(labels);
        }
    }

    /// One request of a client of the agent's, answered with `code` (client-go's
    /// "<error>" when no answer came) after `seconds`, to `host` (the API server's
    /// host:port, as client-go's URL host).
    pub fn rest_request(&self, code: &str, method: &str, host: &str, seconds: f64) {
        self.rest_requests
            .get_or_create(&RestResultLabels {
                code: code.into(),
                host: host.into(),
                method: method.into(),
            })
            .inc();
        self.rest_request_duration
            .get_or_create(&RestLatencyLabels {
                host: host.into(),
                verb: method.into(),
            })
            .observe(seconds);
    }

    /// Whether this replica holds the Lease `name`.
    pub fn leading(&self, name: &str, leading: bool) {
        self.leader_status
            .get_or_create(&NameLabels { name: name.into() })
            .set(i64::from(leading));
    }

    /// schedule_pod's time, from the cycle's start (kube's schedulePod), whatever it found.
    pub fn scheduling_algorithm(&self, seconds: f64) {
        self.scheduling_algorithm_duration.observe(seconds);
    }

    /// One watch event handled: `event` is kube's label (its ClusterEvent's, as
    /// "AssignedPodAdd" or "NodeDelete").
    pub fn event_handled(&self, event: &str, seconds: f64) {
        self.event_handling_duration
            .get_or_create(&EventLabels {
                event: event.into(),
            })
            .observe(seconds);
    }

    /// The cache's nodes, pods (bound or assumed) and assumed pods, as kube's
    /// updateMetrics sets them each second.
    pub fn set_cache_size(&self, nodes: usize, pods: usize, assumed_pods: usize) {
        for (kind, n) in [
            ("nodes", nodes),
            ("pods", pods),
            ("assumed_pods", assumed_pods),
        ] {
            self.cache_size
                .get_or_create(&TypeLabels {
                    r#type: kind.into(),
                })
                .set(n as i64);
        }
    }

    /// DefaultPreemption's PodGroupPostFilter ended with `code` (kube's status code name).
    pub fn workload_preemption_attempt(&self, code: &str) {
        self.workload_preemption_attempts
            .get_or_create(&ResultLabels {
                result: code.into(),
            })
            .inc();
    }

    /// A preemptor's ("pod" or "podgroup") victims found, before they are evicted.
    pub fn preemption_evaluated(&self, preemptor: &str, code: &str, seconds: f64) {
        self.preemption_evaluation_duration
            .get_or_create(&PreemptorResultLabels {
                preemptor: preemptor.into(),
                result: code.into(),
            })
            .observe(seconds);
    }

    /// A preemption carried out (kube's observeVictims): its victims, the pod groups
    /// disrupted whole and the budgets it breaks.
    pub fn preempting(&self, preemptor: &str, victims: usize, disruptions: usize, pdb: usize) {
        if preemptor == "pod" {
            self.preemption_victims.observe(victims as f64);
        } else {
            self.workload_preemption_victims.observe(victims as f64);
        }
        let labels = PreemptorLabels {
            preemptor: preemptor.into(),
        };
        if disruptions > 0 {
            self.preemption_workload_disruptions
                .get_or_create(&labels)
                .observe(disruptions as f64);
        }
        if pdb > 0 {
            self.preemption_pdb_violations
                .get_or_create(&labels)
                .inc_by(pdb as u64);
        }
    }

    /// A pod group cycle's PlacementGenerate made `n` candidate placements.
    pub fn placements_generated(&self, profile: &str, n: usize) {
        self.generated_placements
            .get_or_create(&ProfileLabels {
                profile: profile.into(),
            })
            .inc_by(n as u64);
    }

    /// One placement simulated: the group fit in it or not.
    pub fn placement_evaluated(&self, profile: &str, feasible: bool, seconds: f64) {
        let labels = ProfileResultLabels {
            profile: profile.into(),
            result: if feasible { "feasible" } else { "infeasible" }.into(),
        };
        self.placement_evaluations.get_or_create(&labels).inc();
        self.placement_evaluation_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    pub fn set_pending(&self, queue: &str, n: usize) {
        self.pending_pods
            .get_or_create(&QueueLabels {
                queue: queue.into(),
            })
            .set(n as i64);
    }
}

/// kube-scheduler's stability levels, which prefix its metrics' help.
#[derive(Clone, Copy)]
enum Stability {
    Alpha,
    Beta,
    Stable,
}

/// A family under kube's name, its help printed as kube prints it: the stability level
/// in brackets, then kube's text as it is. `Registry::register` would end every help
/// with a period, which kube's texts do not all have.
struct KubeFamily<M> {
    name: &'static str,
    help: String,
    metric: M,
}

impl<M> std::fmt::Debug for KubeFamily<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeFamily")
            .field("name", &self.name)
            .finish()
    }
}

impl<M: EncodeMetric + Send + Sync + 'static> Collector for KubeFamily<M> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // As the registry's own: a family without series prints nothing, help included.
        if self.metric.is_empty() {
            return Ok(());
        }
        let metric_encoder =
            encoder.encode_descriptor(self.name, &self.help, None, self.metric.metric_type())?;
        self.metric.encode(metric_encoder)
    }
}

/// Registers `metric` under kube's `name`, `level` and `text`.
fn kube<M: EncodeMetric + Clone + Send + Sync + 'static>(
    registry: &mut Registry,
    name: &'static str,
    level: Stability,
    text: &str,
    metric: &M,
) {
    let level = match level {
        Stability::Alpha => "ALPHA",
        Stability::Beta => "BETA",
        Stability::Stable => "STABLE",
    };
    registry.register_collector(Box::new(KubeFamily {
        name,
        help: format!("[{level}] {text}"),
        metric: metric.clone(),
    }));
}

/// kube's attempts label: the count, capped at "15+" to bound the cardinality.
fn attempts_label(attempts: u32) -> String {
    if attempts >= 15 {
        "15+".into()
    } else {
        attempts.to_string()
    }
}

/// kube-scheduler's `pluginMetricsSamplePercent`: the share of scheduling cycles whose
/// plugin timings are recorded, as timing every plugin call costs too much.
pub(crate) const PLUGIN_METRICS_SAMPLE_PERCENT: u32 = 10;

/// Decides, once per scheduling cycle, whether its plugin timings are recorded.
pub fn sample_plugin_metrics<R: rand::RngExt + ?Sized>(rng: &mut R) -> bool {
    rng.random_range(0..100) < PLUGIN_METRICS_SAMPLE_PERCENT
}

/// One registry per process, like kube-scheduler's legacy registry.
pub fn global() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(Metrics::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn help_reads_as_kube_schedulers() {
        let m = Metrics::new();
        // A family without series prints nothing, help included.
        m.plugin("NodeName", "Filter", "Success", 0.001);
        m.attempt("scheduled", "default-scheduler", 0.01);
        let text = m.encode();
        for line in [
            // kube's own texts, with or without a final period.
            "# HELP scheduler_preemption_victims [STABLE] Number of selected preemption victims for preemption initiated by a single pod",
            "# HELP scheduler_pod_scheduling_attempts [STABLE] Number of attempts to successfully schedule a pod.",
            "# HELP scheduler_plugin_execution_duration_seconds [BETA] Duration for running a plugin at a specific extension point.",
            "# HELP scheduler_scheduling_algorithm_duration_seconds [BETA] Scheduling algorithm latency in seconds",
            "# HELP scheduler_scheduling_attempt_duration_seconds [STABLE] Scheduling attempt latency in seconds (scheduling algorithm + binding)",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
    }

    /// The `le` bounds of `name`'s first series, in order.
    fn buckets(text: &str, name: &str) -> Vec<String> {
        let prefix = format!("{name}_bucket{{");
        let mut first_labels = None;
        let mut out = Vec::new();
        for l in text.lines().filter(|l| l.starts_with(&prefix)) {
            // `le` comes first here (client_golang prints it last).
            let labels = &l[prefix.len()..l.find('}').unwrap_or(l.len())];
            let Some(rest) = labels.strip_prefix("le=\"") else {
                continue;
            };
            let (le, others) = rest.split_once('"').unwrap_or((rest, ""));
            if *first_labels.get_or_insert(others.to_string()) != others {
                break;
            }
            out.push(le.to_string());
        }
        out
    }

    /// Whether `les` are Go's metrics.ExponentialBuckets(start, factor, count), +Inf last.
    fn is_exponential(les: &[String], start: f64, factor: f64, count: i32) -> bool {
        les.len() == count as usize + 1
            && les.last().is_some_and(|l| l == "+Inf")
            && (les.iter().zip(0..count)).all(|(le, i)| {
                let want = start * factor.powi(i);
                le.parse::<f64>()
                    .is_ok_and(|got| (got - want).abs() <= want * 1e-9)
            })
    }

    #[test]
    fn families_are_kubes_with_their_labels_and_buckets() {
        let m = Metrics::new();
        m.rest_request("200", "GET", "10.96.0.1:443", 0.003);
        m.leading("mcsched-agent", true);
        m.scheduling_algorithm(0.002);
        m.event_handled("AssignedPodAdd", 0.0001);
        m.set_cache_size(3, 10, 1);
        m.workload_preemption_attempt("Success");
        m.preemption_evaluated("podgroup", "Success", 0.004);
        m.preempting("podgroup", 4, 1, 2);
        m.placements_generated("default-scheduler", 3);
        m.placement_evaluated("default-scheduler", true, 0.002);
        let text = m.encode();
        for line in [
            "# HELP rest_client_requests [ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
            "rest_client_requests_total{code=\"200\",host=\"10.96.0.1:443\",method=\"GET\"} 1",
            "# HELP rest_client_request_duration_seconds [ALPHA] Request latency in seconds. Broken down by verb, and host.",
            "rest_client_request_duration_seconds_count{host=\"10.96.0.1:443\",verb=\"GET\"} 1",
            "# HELP leader_election_master_status [ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            "leader_election_master_status{name=\"mcsched-agent\"} 1",
            "# HELP scheduler_event_handling_duration_seconds [ALPHA] Event handling latency in seconds.",
            "scheduler_event_handling_duration_seconds_count{event=\"AssignedPodAdd\"} 1",
            "# HELP scheduler_cache_size [ALPHA] Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            "scheduler_cache_size{type=\"nodes\"} 3",
            "scheduler_cache_size{type=\"pods\"} 10",
            "scheduler_cache_size{type=\"assumed_pods\"} 1",
            "scheduler_workload_preemption_attempts_total{result=\"Success\"} 1",
            "scheduler_workload_preemption_victims_sum 4.0",
            "scheduler_preemption_workload_disruptions_count{preemptor=\"podgroup\"} 1",
            "scheduler_preemption_pdb_violations_total{preemptor=\"podgroup\"} 2",
            "scheduler_preemption_evaluation_duration_seconds_count{preemptor=\"podgroup\",result=\"Success\"} 1",
            "scheduler_generated_placements_total{profile=\"default-scheduler\"} 3",
            "scheduler_placement_evaluations_total{profile=\"default-scheduler\",result=\"feasible\"} 1",
            "scheduler_placement_evaluation_duration_seconds_count{profile=\"default-scheduler\",result=\"feasible\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        // client-go's fixed buckets, and kube's exponential ones.
        assert_eq!(
            buckets(&text, "rest_client_request_duration_seconds"),
            [
                "0.005", "0.025", "0.1", "0.25", "0.5", "1.0", "2.0", "4.0", "8.0", "15.0", "30.0",
                "60.0", "+Inf"
            ]
        );
        for (name, start, factor, count) in [
            (
                "scheduler_scheduling_algorithm_duration_seconds",
                0.001,
                2.0,
                15,
            ),
            ("scheduler_event_handling_duration_seconds", 0.0001, 2.0, 12),
            ("scheduler_workload_preemption_victims", 1.0, 2.0, 11),
            ("scheduler_preemption_workload_disruptions", 1.0, 2.0, 11),
            (
                "scheduler_preemption_evaluation_duration_seconds",
                0.001,
                2.0,
                16,
            ),
            (
                "scheduler_placement_evaluation_duration_seconds",
                0.001,
                2.0,
                15,
            ),
        ] {
            let les = buckets(&text, name);
            assert!(
                is_exponential(&les, start, factor, count),
                "{name}: {les:?}"
            );
        }
        // 12 and 16 buckets end at kube's ~0.2 s and ~32.8 s.
        assert_eq!(
            buckets(&text, "scheduler_event_handling_duration_seconds")[11],
            "0.2048"
        );
        assert_eq!(
            buckets(&text, "scheduler_preemption_evaluation_duration_seconds")[15],
            "32.768"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total "),
            "{text}"
        );
        for name in [
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name} "))),
                "{name}\n{text}"
            );
        }
    }

    #[test]
    fn a_pods_preemption_counts_under_kubes_single_pod_victims() {
        let m = Metrics::new();
        m.preempting("pod", 3, 0, 1);
        let text = m.encode();
        assert!(
            text.lines()
                .any(|l| l == "scheduler_preemption_victims_sum 3.0"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "scheduler_preemption_pdb_violations_total{preemptor=\"pod\"} 1"),
            "{text}"
        );
        // Series-less, as kube's: a histogram without labels prints its zeros.
        assert!(
            text.lines()
                .any(|l| l == "scheduler_workload_preemption_victims_count 0"),
            "{text}"
        );
        assert!(
            !text.contains("scheduler_preemption_workload_disruptions"),
            "{text}"
        );
    }

    #[test]
    fn unschedulable_labels_that_empty_drop_to_zero() {
        let m = Metrics::new();
        let key = |plugin: &'static str| (plugin, "p".to_string());
        m.set_unschedulable(&HashMap::from([(key("A"), 2), (key("B"), 1)]));
        m.set_unschedulable(&HashMap::from([(key("A"), 1)]));
        let text = m.encode();
        for line in [
            "scheduler_unschedulable_pods{plugin=\"A\",profile=\"p\"} 1",
            "scheduler_unschedulable_pods{plugin=\"B\",profile=\"p\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
    }

    #[test]
    fn plugin_evaluations_add_up_per_profile() {
        let m = Metrics::new();
        m.plugin_evaluations(
            &[("Filter", "NodeName", 5), ("Score", "ImageLocality", 3)],
            "a",
        );
        m.plugin_evaluations(&[("Filter", "NodeName", 2)], "a");
        m.plugin_evaluations(&[("Filter", "NodeName", 1)], "b");
        let text = m.encode();
        for line in [
            "scheduler_plugin_evaluation_total{plugin=\"NodeName\",extension_point=\"Filter\",profile=\"a\"} 7",
            "scheduler_plugin_evaluation_total{plugin=\"ImageLocality\",extension_point=\"Score\",profile=\"a\"} 3",
            "scheduler_plugin_evaluation_total{plugin=\"NodeName\",extension_point=\"Filter\",profile=\"b\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
    }

    #[test]
    fn a_failing_leaf_copy_is_named_until_it_recovers() {
        let m = Metrics::new();
        m.leaf_copy_failed("east", "ConfigMap", "shop", "settings", 1);
        m.leaf_copy_failed("east", "ConfigMap", "shop", "settings", 2);
        let text = m.encode();
        for line in [
            "mcsched_leaf_copy_failures_total{cluster=\"east\",kind=\"ConfigMap\"} 2",
            "mcsched_leaf_copy_consecutive_failures{cluster=\"east\",kind=\"ConfigMap\",namespace=\"shop\",name=\"settings\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        m.leaf_copy_recovered("east", "ConfigMap", "shop", "settings");
        let text = m.encode();
        assert!(
            !text.contains("mcsched_leaf_copy_consecutive_failures{"),
            "{text}"
        );
        assert!(text.contains("mcsched_leaf_copy_failures_total{"), "{text}");
    }

    #[test]
    fn attempts_label_is_capped_as_kubes() {
        assert_eq!(attempts_label(1), "1");
        assert_eq!(attempts_label(14), "14");
        assert_eq!(attempts_label(15), "15+");
        assert_eq!(attempts_label(40), "15+");
    }

    #[test]
    fn a_tenth_of_cycles_is_sampled() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let n = 100_000;
        let sampled = (0..n).filter(|_| sample_plugin_metrics(&mut rng)).count();
        // 10 % of 100 000 draws; a binomial's standard deviation here is under 100.
        assert!((9_500..=10_500).contains(&sampled), "{sampled} of {n}");
    }
}
