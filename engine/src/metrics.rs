//! kube-scheduler's metrics, under kube-scheduler's names, so dashboards and alerts made
//! for it work unchanged.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
        registry.register(
            "scheduler_schedule_attempts",
            kube_help(Stability::Stable, "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem."),
            schedule_attempts.clone(),
        );
        let attempt_duration = Family::<AttemptLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 15))
        });
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            kube_help(
                Stability::Stable,
                "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ),
            attempt_duration.clone(),
        );
        let pod_group_attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "scheduler_podgroup_schedule_attempts",
            kube_help(Stability::Alpha, "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be scheduled, while 'error' means an internal scheduler problem."),
            pod_group_attempts.clone(),
        );
        let pod_group_attempt_duration =
            Family::<AttemptLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            });
        registry.register(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            kube_help(
                Stability::Alpha,
                "Pod group scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ),
            pod_group_attempt_duration.clone(),
        );
        let pod_group_algorithm_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            kube_help(
                Stability::Alpha,
                "Pod group scheduling algorithm latency in seconds",
            ),
            pod_group_algorithm_duration.clone(),
        );
        let pending_pods = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "scheduler_pending_pods",
            kube_help(Stability::Stable, "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated."),
            pending_pods.clone(),
        );
        let queue_incoming = Family::<IncomingLabels, Counter>::default();
        registry.register(
            "scheduler_queue_incoming_pods",
            kube_help(
                Stability::Stable,
                "Number of pods added to scheduling queues by event and queue type.",
            ),
            queue_incoming.clone(),
        );
        let extension_point_duration =
            Family::<ExtensionPointLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 12))
            });
        registry.register(
            "scheduler_framework_extension_point_duration_seconds",
            kube_help(
                Stability::Stable,
                "Latency for running all plugins of a specific extension point.",
            ),
            extension_point_duration.clone(),
        );
        let plugin_duration = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00001, 1.5, 20))
        });
        registry.register(
            "scheduler_plugin_execution_duration_seconds",
            kube_help(
                Stability::Alpha,
                "Duration for running a plugin at a specific extension point.",
            ),
            plugin_duration.clone(),
        );
        let plugin_evaluations = Family::<EvaluationLabels, Counter>::default();
        registry.register(
            "scheduler_plugin_evaluation",
            kube_help(Stability::Beta, "Number of attempts to schedule pods by each plugin and the extension point (available only in PreFilter, Filter, PreScore, and Score)."),
            plugin_evaluations.clone(),
        );
        let preemption_attempts = Counter::default();
        registry.register(
            "scheduler_preemption_attempts",
            kube_help(
                Stability::Stable,
                "Total preemption attempts in the cluster till now",
            ),
            preemption_attempts.clone(),
        );
        // kube's buckets: 64 victims or more is rare enough for one bucket.
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        registry.register(
            "scheduler_preemption_victims",
            kube_help(Stability::Stable, "Number of selected preemption victims"),
            preemption_victims.clone(),
        );
        let pod_scheduling_attempts = Histogram::new(exponential_buckets(1.0, 2.0, 5));
        registry.register(
            "scheduler_pod_scheduling_attempts",
            kube_help(
                Stability::Stable,
                "Number of attempts to successfully schedule a pod.",
            ),
            pod_scheduling_attempts.clone(),
        );
        // From 10 ms to the last bucket's [~88 min, +Inf), as kube's.
        let pod_scheduling_sli_duration =
            Family::<AttemptsLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 2.0, 20))
            });
        registry.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            kube_help(Stability::Beta, "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts."),
            pod_scheduling_sli_duration.clone(),
        );
        let unschedulable_pods = Family::<PluginProfileLabels, Gauge>::default();
        registry.register(
            "scheduler_unschedulable_pods",
            kube_help(Stability::Beta, "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin."),
            unschedulable_pods.clone(),
        );
        let permit_wait_duration = Family::<ResultLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 15))
        });
        registry.register(
            "scheduler_permit_wait_duration_seconds",
            kube_help(Stability::Beta, "Duration of waiting on permit."),
            permit_wait_duration.clone(),
        );
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

/// Help as kube-scheduler prints it: "[STABLE] text." (the encoder adds the final period).
fn kube_help(level: Stability, text: &str) -> String {
    let level = match level {
        Stability::Alpha => "ALPHA",
        Stability::Beta => "BETA",
        Stability::Stable => "STABLE",
    };
    format!("[{level}] {}", text.trim_end_matches('.'))
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
        let text = m.encode();
        for line in [
            "# HELP scheduler_preemption_victims [STABLE] Number of selected preemption victims.",
            "# HELP scheduler_pod_scheduling_attempts [STABLE] Number of attempts to successfully schedule a pod.",
            "# HELP scheduler_plugin_execution_duration_seconds [ALPHA] Duration for running a plugin at a specific extension point.",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
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
