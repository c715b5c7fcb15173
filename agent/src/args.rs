use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use mcsched_shared::config::duration;
use mcsched_shared::config::feature_gates::{FeatureGateError, FeatureGates};

/// mcsched-agent schedules the pods whose spec.schedulerName names one of its profiles,
/// onto host nodes and leaf clusters' virtual nodes.
#[derive(Debug, Clone, Parser)]
#[command(name = "mcsched-agent", version, about, long_about = None)]
pub struct Args {
    /// Kubeconfig of the cluster to schedule in; without it the in-cluster
    /// ServiceAccount configuration is used (clientConnection.kubeconfig in --config
    /// takes its place when set).
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Context of the kubeconfig to use (its current context when not given).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// KubeSchedulerConfiguration file (v1, v1beta3, v1beta2 or v1beta1): profiles,
    /// plugins and their arguments, extenders, leader election, client settings.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Validate the configuration, print the resolved profiles and exit (0 when valid).
    #[arg(long)]
    pub check: bool,

    /// The spec.schedulerName served when no --config is given.
    #[arg(long, default_value = mcsched_shared::keys::DEFAULT_SCHEDULER_NAME, value_name = "NAME")]
    pub scheduler_name: String,

    /// Requests per second to the API server (without --config; with it,
    /// clientConnection.qps); 0 or less lifts the limit.
    #[arg(long, default_value_t = 50.0, allow_negative_numbers = true)]
    pub kube_api_qps: f32,

    /// Burst above --kube-api-qps (clientConnection.burst with --config).
    #[arg(long, default_value_t = 100)]
    pub kube_api_burst: u32,

    /// The encoding of the hot requests: bindings, events, pod and node lists and
    /// watches (without --config; with it, clientConnection.contentType). JSON stays for
    /// the rest. The environment variable lets a test suite run every agent in either.
    #[arg(
        long,
        env = "MCSCHED_KUBE_API_CONTENT_TYPE",
        default_value = mcsched_wire::PROTOBUF,
        value_name = "TYPE"
    )]
    pub kube_api_content_type: mcsched_wire::ContentType,

    /// How many bindings may be in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel_bindings: u16,

    /// Port of the HTTPS server (health, metrics, explanations); 0 disables it.
    #[arg(long, default_value_t = 10259)]
    pub secure_port: u16,

    /// Address the HTTPS server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// The address the API server reaches this agent at when it leads (written to the
    /// EndpointSlice of the mcsched.io API's Service). In a cluster, the pod's IP.
    #[arg(long, env = "POD_IP", value_name = "IP")]
    pub advertise_address: Option<IpAddr>,

    /// Paths served without authentication or authorization (exact, or a prefix ending
    /// in *), as kube-scheduler's flag.
    #[arg(long, value_delimiter = ',', value_name = "PATHS",
          default_values_t = crate::api::server::ALWAYS_ALLOW_PATHS.iter().map(|p| p.to_string()))]
    pub authorization_always_allow_paths: Vec<String>,

    /// How long TokenReview answers are kept (e.g. 10s).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration::parse)]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// How long allowed SubjectAccessReview answers are kept.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration::parse)]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long denied SubjectAccessReview answers are kept.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration::parse)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,

    /// What-ifs and explanations of pending pods computed at once; more get 429.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..), value_name = "N")]
    pub max_concurrent_what_ifs: u16,

    /// Deadline of each request to the secure port (e.g. 30s).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = duration::parse)]
    pub request_timeout: Duration,

    /// How long a client of the secure port (or the health port) may take to send a
    /// request's headers, and a new connection its TLS handshake and its first request
    /// (Go's ReadHeaderTimeout; kube-apiserver's 32s). 0s lifts it.
    #[arg(long, default_value = "32s", value_name = "DURATION", value_parser = duration::parse)]
    pub header_read_timeout: Duration,

    /// How long a connection to the secure port (or the health port) may go without a
    /// byte either way before it is closed (Go's IdleTimeout; kube-apiserver's 90s).
    /// Keep it above --request-timeout. 0s lifts it.
    #[arg(long, default_value = "90s", value_name = "DURATION", value_parser = duration::parse)]
    pub idle_timeout: Duration,

    /// Connections the secure port holds at once; more are closed at once. 0 lifts it.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub max_connections: usize,

    /// Connections the secure port holds at once from one client address, so that one
    /// pod cannot take every place. 0 (the default) lifts it: the API server's
    /// aggregator proxies every user's request from its own address, so a limit here
    /// must stay above its concurrent requests; probes are kept apart by --health-port.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_connections_per_ip: usize,

    /// Port of a plain-HTTP listener answering only /healthz, /readyz, /livez and
    /// /metrics, without authentication (kube-scheduler's probes can point at a port of
    /// their own): a flood of the secure port then cannot fail the probes. 0 (the
    /// default) serves them on the secure port only.
    #[arg(long, default_value_t = 0, value_name = "PORT")]
    pub health_port: u16,

    /// Address the --health-port listener listens on.
    #[arg(long, default_value = "0.0.0.0", value_name = "IP")]
    pub health_bind_address: IpAddr,

    /// Serving certificate (PEM); without it the agent makes a CA and a certificate of
    /// its own at every start (valid a year), and, leading, puts that CA in the
    /// mcsched.io APIService's caBundle.
    #[arg(long, value_name = "FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// Private key of --tls-cert-file (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Elect a leader on a Lease before scheduling, so replicas can stand by (without
    /// --config; with it, leaderElection in the file decides).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,

    /// Name of the leader Lease (the scheduler name when not given).
    #[arg(long, value_name = "NAME")]
    pub leader_elect_resource_name: Option<String>,

    /// Namespace of the leader Lease.
    #[arg(long, default_value = "kube-system", value_name = "NAMESPACE")]
    pub leader_elect_resource_namespace: String,

    /// Namespace of the agent: leaf clusters are the join Secrets here (labelled
    /// mcsched.io/cluster). In a cluster, set from the pod's namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = mcsched_shared::keys::SYSTEM_NAMESPACE, value_name = "NAMESPACE")]
    pub namespace: String,

    /// A pod whose leaf copy stays Pending this long (seconds) is taken back from the leaf.
    #[arg(long, default_value_t = 120, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub leaf_pending_timeout: u64,

    /// A leaf a pod with a controller was taken back from, or whose admission refused its
    /// copy, is avoided for the pod's owner this long (seconds), twice as long each time
    /// again (up to 32 times).
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub leaf_avoid_duration: u64,

    /// Renew a leaf's token at most this long (seconds) after it was issued; 0: at 80 %
    /// of its lifetime (join's --token-lifetime), as is the default.
    #[arg(long, default_value_t = 0, value_name = "SECONDS")]
    pub leaf_token_renew_after: u64,

    /// A ConfigMap, Secret or PVC copied into a leaf is deleted there once no pod of that
    /// leaf has referred to it for this long (seconds); a PVC's copy only once the host PVC
    /// is gone too.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub leaf_unused_copy_grace: u64,

    /// Requests per second to each leaf cluster's API server (its own budget per leaf:
    /// pod sync, watches' lists, and the leaf check's questions); 0 or less lifts the
    /// limit.
    #[arg(long, default_value_t = crate::multicluster::registry::DEFAULT_LEAF_API_QPS, allow_negative_numbers = true, value_name = "QPS")]
    pub leaf_api_qps: f32,

    /// Burst above --leaf-api-qps.
    #[arg(long, default_value_t = crate::multicluster::registry::DEFAULT_LEAF_API_BURST, value_name = "N")]
    pub leaf_api_burst: u32,

    /// --log, -v and --logging-format.
    #[command(flatten)]
    pub log: crate::observe::telemetry::LogOptions,

    /// kube-scheduler v1.37's feature gates, as its --feature-gates takes them
    /// (A=true,B=false; every gate of the release is known; an unknown gate, a locked one
    /// set against its lock, or one whose dependencies are off is an error, in
    /// component-base's words: GangScheduling, folded into GenericWorkload, is unknown).
    /// The agent acts on TopologyAwareWorkloadScheduling (off by default, as in v1.37; it
    /// needs GenericWorkload=true): pod groups are then placed one topology domain at a
    /// time. CompositePodGroup=true is refused. Pod groups are scheduled wherever the API
    /// server serves PodGroups, GenericWorkload or not; other gates change nothing
    /// (docs/kubernetes-versions.md).
    #[arg(long, value_name = "GATES", default_value = "", value_parser = parse_feature_gates)]
    pub feature_gates: FeatureGates,
}

fn parse_feature_gates(s: &str) -> Result<FeatureGates, FeatureGateError> {
    FeatureGates::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_are_kube_schedulers() {
        let args = Args::try_parse_from([
            "mcsched-agent",
            "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true",
        ])
        .expect("valid gates");
        assert!(
            args.feature_gates
                .enabled("TopologyAwareWorkloadScheduling")
        );
        let e = Args::try_parse_from(["mcsched-agent", "--feature-gates=GangScheduling=true"])
            .expect_err("a gate v1.37 folded into GenericWorkload");
        assert!(
            e.to_string()
                .contains("unrecognized feature gate: GangScheduling"),
            "{e}"
        );
    }
}
