// Command controlplane runs one real Kubernetes control plane in a single process:
// embedded etcd and kube-apiserver, optionally kube-controller-manager, kube-scheduler
// and a kubelet simulator. mcsched's end-to-end tests and benchmarks start one per cluster.
//
//	controlplane --name N --data-dir D --kubeconfig K [flags]   a control plane
//	controlplane scheduler --kubeconfig K --data-dir D           kube-scheduler alone
//	controlplane kubelet --cluster-kubeconfig K ...              a real kubelet (a node)
//	controlplane remove-pods --container-runtime-endpoint E      every pod of a CRI runtime removed
//	controlplane oracle --kubeconfig K [--config F]              kube-scheduler judging pods (oracle_*.go)
//	controlplane engine-bench [--bench NAME]                     kube-scheduler's algorithm timed (enginebench.go)
//	controlplane live-oracle                                     kube-scheduler's sampled search from a start index (liveoracle.go)
//
// .build/controlplane is built from the newest release of the version window (go.mod);
// `make controlplane-v1.34` (-v1.35, -v1.36) builds the same sources from go.v1.34.mod
// with the controlplane_skew tag: no oracle, live oracle or engine bench there
// (oracle_skew.go), and a shim file where a component's API differs between minors
// (cri_client*.go, controller_manager_gates*.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
)

type config struct {
	name                  string
	dataDir               string
	kubeconfig            string
	port                  int
	bindAddress           string
	realNodes             bool
	withControllerManager bool
	withScheduler         bool
	simulateKubelets      bool
	podAddresses          podAddresses
	clientQPS             float64
	clientBurst           int
	verbosity             int
	auditLog              string
	compactionInterval    time.Duration
	featureGates          string
	schedulerProfiles     string
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.StringVar(&c.name, "name", "", "name of this cluster (used in the kubeconfig)")
	fs.StringVar(&c.dataDir, "data-dir", "", "directory for etcd data and certificates")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig")
	fs.IntVar(&c.port, "port", 0, "kube-apiserver secure port on 127.0.0.1 (0 picks a free one)")
	fs.StringVar(&c.bindAddress, "bind-address", "127.0.0.1", "kube-apiserver's address (in its certificate and the kubeconfig); real nodes' pods need one that is not loopback")
	fs.BoolVar(&c.realNodes, "real-nodes", false, "nodes will be real kubelets (`controlplane kubelet`): ServiceAccount admission gives pods their token volume, as in any cluster")
	fs.BoolVar(&c.withControllerManager, "with-controller-manager", false, "run kube-controller-manager in-process")
	fs.BoolVar(&c.withScheduler, "with-scheduler", false, "run kube-scheduler (profile default-scheduler) in-process")
	fs.StringVar(&c.schedulerProfiles, "scheduler-profiles", "", "a file holding a KubeSchedulerConfiguration's `profiles:` (YAML) for the in-process kube-scheduler, in place of its default profile (a differential test runs kube-scheduler with the profile it gives mcsched)")
	fs.BoolVar(&c.simulateKubelets, "simulate-kubelets", false, "renew node Leases and mark pods on non-virtual nodes Running")
	fs.Var(&c.podAddresses, "pod-address", "NAMESPACE/PREFIX=IP: the simulated kubelet gives pods whose name starts with PREFIX this IP, so a process outside the cluster can stand in for them behind a Service (repeatable)")
	fs.Float64Var(&c.clientQPS, "client-qps", 5000, "QPS of the in-process components' clients (scheduler_perf lifts the limits too)")
	fs.IntVar(&c.clientBurst, "client-burst", 5000, "burst of the in-process components' clients")
	fs.IntVar(&c.verbosity, "v", 0, "klog verbosity of the in-process components")
	fs.StringVar(&c.auditLog, "audit-log", "", "kube-apiserver's audit log (JSON lines; relative to --data-dir): every write (create, update, patch, delete, deletecollection) of any resource, at Metadata level")
	workloads := "this release (v" + version.DefaultKubeBinaryVersion + ") has no Workload API"
	if gv := workloadAPI(); gv != "" {
		workloads = "GenericWorkload=true also serves " + gv + " (the Workload API)"
	}
	fs.StringVar(&c.featureGates, "feature-gates", "", "kube feature gates (A=true,B=false) of the API server and the in-process components, which share them; "+workloads)
	fs.DurationVar(&c.compactionInterval, "etcd-compaction-interval", 0, "how often kube-apiserver compacts etcd (0: its default, 5m); short, watches resumed from old revisions get 410 Gone")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.name == "" {
		return c, fmt.Errorf("--name is required")
	}
	if c.dataDir == "" {
		return c, fmt.Errorf("--data-dir is required")
	}
	if c.kubeconfig == "" {
		return c, fmt.Errorf("--kubeconfig is required")
	}
	if net.ParseIP(c.bindAddress) == nil {
		return c, fmt.Errorf("--bind-address %q is not an IP address", c.bindAddress)
	}
	if c.port < 0 || c.port > 65535 {
		return c, fmt.Errorf("--port %d is out of range", c.port)
	}
	return c, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "kubelet" {
		if err := runKubelet(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane kubelet: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "remove-pods" {
		if err := runRemovePods(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane remove-pods: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "oracle" {
		if err := runOracle(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane oracle: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "live-oracle" {
		if err := runLiveOracle(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane live-oracle: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "engine-bench" {
		if err := runEngineBench(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane engine-bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "encode" {
		if err := runEncode(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane encode: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "scheduler" {
		if err := runSchedulerOnly(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane scheduler: %v\n", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane %s: %v\n", cfg.name, err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	initKlog(cfg.verbosity)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
		return err
	}
	dataDir, err := filepath.Abs(cfg.dataDir)
	if err != nil {
		return err
	}
	if cfg.auditLog != "" && !filepath.IsAbs(cfg.auditLog) {
		cfg.auditLog = filepath.Join(dataDir, cfg.auditLog)
	}
	pki, err := generatePKI(filepath.Join(dataDir, "pki"), cfg.bindAddress)
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}

	if cfg.withControllerManager {
		if err := controllerManagerGates(); err != nil {
			return fmt.Errorf("kube-controller-manager's feature gates: %w", err)
		}
	}

	etcd, err := startEtcd(filepath.Join(dataDir, "etcd"))
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.close()

	// A port picked here is free when picked and taken by kube-apiserver only later:
	// another process may bind it between the two, so a picked port that turns out taken
	// is picked again (a port asked for with --port is not).
	var (
		url    string
		apiErr chan error
		admin  kubernetes.Interface
	)
	for attempt := 1; ; attempt++ {
		port := cfg.port
		if cfg.port == 0 {
			if port, err = freePort(); err != nil {
				return err
			}
		}
		url = "https://" + net.JoinHostPort(cfg.bindAddress, fmt.Sprint(port))
		if err := writeKubeconfig(cfg.kubeconfig, cfg.name, url, pki); err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		apiErr = make(chan error, 1)
		go func() { apiErr <- runAPIServer(ctx, cfg, dataDir, port, etcd.clientURL, pki) }()
		if admin, err = adminClient(cfg.kubeconfig, cfg.clientQPS, cfg.clientBurst); err != nil {
			return err
		}
		err = waitReady(ctx, admin, apiErr)
		if err == nil {
			break
		}
		if cfg.port != 0 || attempt == 5 || !addressInUse(err) {
			return err
		}
		fmt.Fprintf(os.Stderr, "controlplane: port %d was taken before kube-apiserver bound it; picking another\n", port)
	}

	components := make(chan error, 3)
	if cfg.withControllerManager {
		go func() { components <- wrap("kube-controller-manager", runControllerManager(ctx, cfg, pki)) }()
	}
	if cfg.withScheduler {
		go func() { components <- wrap("kube-scheduler", runScheduler(ctx, cfg, dataDir)) }()
	}
	if cfg.simulateKubelets {
		go func() { components <- wrap("kubelet simulator", runKubeletSimulator(ctx, admin, cfg.podAddresses)) }()
	}

	fmt.Printf("READY %s %s\n", cfg.name, url)

	select {
	case <-ctx.Done():
	case err := <-apiErr:
		return fmt.Errorf("kube-apiserver stopped: %w", err)
	case err := <-components:
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	stop()
	// Give kube-apiserver a moment to close its listeners and etcd watches before etcd goes.
	select {
	case <-apiErr:
	case <-time.After(5 * time.Second):
	}
	klog.Flush()
	return nil
}

// runSchedulerOnly runs only the real kube-scheduler, in this process of its own, against
// an API server that is already running: the benchmarks measure its CPU time and peak
// RSS from /proc exactly as they measure mcsched-agent's.
func runSchedulerOnly(args []string) error {
	var c config
	fs := flag.NewFlagSet("controlplane scheduler", flag.ContinueOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the API server to schedule in")
	fs.StringVar(&c.dataDir, "data-dir", "", "directory for the scheduler's configuration file")
	fs.Float64Var(&c.clientQPS, "client-qps", 5000, "QPS of kube-scheduler's client")
	fs.IntVar(&c.clientBurst, "client-burst", 5000, "burst of kube-scheduler's client")
	fs.IntVar(&c.verbosity, "v", 0, "klog verbosity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.kubeconfig == "" || c.dataDir == "" {
		return fmt.Errorf("--kubeconfig and --data-dir are required")
	}
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return err
	}
	initKlog(c.verbosity)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := runScheduler(ctx, c, c.dataDir)
	klog.Flush()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func wrap(component string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", component, err)
}

func initKlog(v int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", fmt.Sprint(v))
	_ = fs.Set("logtostderr", "true")
}

// addressInUse: a listener could not bind its address (kube-apiserver's error does not
// always wrap the errno).
func addressInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
