//go:build !controlplane_skew

package main

// controlplane oracle: the real kube-scheduler judging pods without scheduling them.
//
// It builds kube-scheduler exactly as `kube-scheduler` does (scheduler.New with the
// in-tree registry, the default profile or a KubeSchedulerConfiguration file, its cache
// fed by its own event handlers) but never runs the scheduling loop: its client may only
// read, so nothing is bound, evicted or written. An HTTP server on loopback answers
// POST /judge with what every plugin says about a pod on the cache's snapshot: PreEnqueue
// and Permit per plugin (GangScheduling's verdicts on a PodGroup's member), PreFilter
// per plugin, every Filter plugin's verdict on every node, every Score plugin's raw and
// normalized score (after NormalizeScore, with its weight), the nodes kube-scheduler
// would choose among, and the FailedScheduling message (FitError with PostFilter's part).
// Requests are served one at a time: the profiles share one snapshot, as in kube-scheduler.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

type victim struct {
	Pod       string `json:"pod"`
	Priority  int32  `json:"priority"`
	StartTime string `json:"startTime,omitempty"`
}

type oracle struct {
	mu      sync.Mutex
	sched   *scheduler.Scheduler
	first   string
	plugins map[string]map[string]fwk.Plugin
	// From the informers the scheduler's handlers are fed by.
	getPod          func(namespace, name string) (*v1.Pod, error)
	namespaceExists func(name string) bool
	serviceExists   func(namespace, name string) bool
	podGroupExists  func(namespace, name string) bool
	pdbs            func() ([]*policy.PodDisruptionBudget, error)
}

func runOracle(args []string) error {
	fs := flag.NewFlagSet("controlplane oracle", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server whose state is judged")
	configFile := fs.String("config", "", "KubeSchedulerConfiguration file (default: kube-scheduler's default profile)")
	listen := fs.String("listen", "127.0.0.1:0", "address of the HTTP server")
	verbosity := fs.Int("v", 0, "klog verbosity")
	featureGates := fs.String("feature-gates", "", "kube feature gates (A=true,B=false), as kube-scheduler's --feature-gates: they decide the default profile's plugins (GenericWorkload adds GangScheduling, TopologyAwareWorkloadScheduling adds TopologyPlacementGenerator and PodGroupPodsCount) and what the plugins do; v1.37 folded the GangScheduling and WorkloadAwarePreemption gates into GenericWorkload, so naming them is an error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	initKlog(*verbosity)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := klog.FromContext(ctx)
	// Before the configuration is defaulted: the default plugins depend on the gates.
	if *featureGates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(*featureGates); err != nil {
			return fmt.Errorf("--feature-gates: %w", err)
		}
	}

	cfg, err := latest.Default()
	if *configFile != "" {
		cfg, err = scheduleroptions.LoadConfigFromFile(logger, *configFile)
	}
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 5000, 5000
	// Read-only: preemption computes its victims but its evictions and status patches
	// fail, so the oracle never changes the cluster it judges.
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return readOnly{rt} })
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	informerFactory := scheduler.NewInformerFactory(client, 0, nil)
	dynInformerFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, v1.NamespaceAll, nil)
	recorders := func(string) events.EventRecorderLogger { return &events.FakeRecorder{} }
	sched, err := scheduler.New(ctx, client, informerFactory, dynInformerFactory, recorders,
		scheduler.WithComponentConfigVersion(cfg.TypeMeta.APIVersion),
		scheduler.WithKubeConfig(rc),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithPercentageOfNodesToScore(cfg.PercentageOfNodesToScore),
		scheduler.WithPodMaxBackoffSeconds(cfg.PodMaxBackoffSeconds),
		scheduler.WithPodInitialBackoffSeconds(cfg.PodInitialBackoffSeconds),
		scheduler.WithExtenders(cfg.Extenders...),
		scheduler.WithParallelism(cfg.Parallelism),
	)
	if err != nil {
		return err
	}
	o := &oracle{sched: sched, first: cfg.Profiles[0].SchedulerName, plugins: map[string]map[string]fwk.Plugin{}}
	for name, p := range sched.Profiles {
		if o.plugins[name], err = pluginsOf(p); err != nil {
			return err
		}
	}
	podLister := informerFactory.Core().V1().Pods().Lister()
	nsLister := informerFactory.Core().V1().Namespaces().Lister()
	o.namespaceExists = func(name string) bool { _, err := nsLister.Get(name); return err == nil }
	svcLister := informerFactory.Core().V1().Services().Lister()
	o.serviceExists = func(ns, name string) bool { _, err := svcLister.Services(ns).Get(name); return err == nil }
	o.getPod = func(ns, name string) (*v1.Pod, error) { return podLister.Pods(ns).Get(name) }
	o.podGroupExists = func(string, string) bool { return false }
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		pgLister := informerFactory.Scheduling().V1beta1().PodGroups().Lister()
		o.podGroupExists = func(ns, name string) bool { _, err := pgLister.PodGroups(ns).Get(name); return err == nil }
	}
	pdbLister := informerFactory.Policy().V1().PodDisruptionBudgets().Lister()
	o.pdbs = func() ([]*policy.PodDisruptionBudget, error) { return pdbLister.List(labels.Everything()) }
	informerFactory.Start(ctx.Done())
	dynInformerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	dynInformerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		return fmt.Errorf("event handlers: %w", err)
	}

	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /judge", o.serveJudge)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Printf("READY oracle http://%s\n", l.Addr())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	klog.Flush()
	return nil
}

// readOnly refuses every request that could change the cluster.
type readOnly struct{ next http.RoundTripper }

func (r readOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return nil, fmt.Errorf("the oracle does not write: %s %s", req.Method, req.URL.Path)
	}
	return r.next.RoundTrip(req)
}

func (o *oracle) serveJudge(w http.ResponseWriter, r *http.Request) {
	var req oracleRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&req); err != nil {
		http.Error(w, "request: "+err.Error(), http.StatusBadRequest)
		return
	}
	timeout := 30 * time.Second
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	answer, status, err := o.judge(ctx, &req)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// judge waits until the snapshot shows the expected state, then runs one scheduling
// cycle up to (not including) Reserve, as kube-scheduler's schedulePod does.
func (o *oracle) judge(ctx context.Context, req *oracleRequest) (*oracleAnswer, int, error) {
	profile := req.Profile
	if profile == "" {
		profile = o.first
	}
	f, ok := o.sched.Profiles[profile]
	if !ok {
		return nil, http.StatusNotFound, fmt.Errorf("no profile %q", profile)
	}
	snapshot, ok := f.SnapshotSharedLister().(*internalcache.Snapshot)
	if !ok {
		return nil, http.StatusInternalServerError, fmt.Errorf("snapshot of type %T", f.SnapshotSharedLister())
	}
	for {
		answer, missing, err := o.attempt(ctx, f, profile, snapshot, req)
		if err != nil {
			return nil, http.StatusInternalServerError, err
		}
		if missing == "" {
			return answer, http.StatusOK, nil
		}
		select {
		case <-ctx.Done():
			return nil, http.StatusConflict, fmt.Errorf("the snapshot never showed the expected state: %s", missing)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// attempt judges the pod if the snapshot shows the expected state, else says what is
// missing.
func (o *oracle) attempt(ctx context.Context, f framework.Framework, profile string, snapshot *internalcache.Snapshot, req *oracleRequest) (*oracleAnswer, string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.sched.Cache.UpdateSnapshot(klog.FromContext(ctx), snapshot); err != nil {
		return nil, "", err
	}
	pod, missing := o.ready(f, snapshot, req)
	if missing != "" {
		return nil, missing, nil
	}
	answer, err := o.cycle(ctx, f, profile, snapshot, pod)
	return answer, "", err
}

// ready returns the pod to judge, or what the snapshot still lacks.
func (o *oracle) ready(f framework.Framework, snapshot *internalcache.Snapshot, req *oracleRequest) (*v1.Pod, string) {
	pod := req.Pod
	if pod == nil {
		p, err := o.getPod(req.Namespace, req.Name)
		if err != nil {
			return nil, fmt.Sprintf("pod %s/%s: %v", req.Namespace, req.Name, err)
		}
		pod = p
	}
	if req.Expect == nil {
		return pod, ""
	}
	nodes, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, err.Error()
	}
	haveNodes, havePods := sets.New[string](), sets.New[string]()
	for _, n := range nodes {
		haveNodes.Insert(n.Node().Name)
		for _, p := range n.GetPods() {
			havePods.Insert(p.GetPod().Namespace + "/" + p.GetPod().Name)
		}
	}
	if d := difference(haveNodes, req.Expect.Nodes); d != "" {
		return nil, "nodes: " + d
	}
	if d := difference(havePods, req.Expect.Pods); d != "" {
		return nil, "pods: " + d
	}
	for _, ns := range req.Expect.Namespaces {
		if !o.namespaceExists(ns) {
			return nil, "namespace " + ns
		}
	}
	for _, key := range req.Expect.Services {
		ns, name, _ := strings.Cut(key, "/")
		if !o.serviceExists(ns, name) {
			return nil, "service " + key
		}
	}
	for _, key := range req.Expect.PodGroups {
		ns, name, _ := strings.Cut(key, "/")
		if !o.podGroupExists(ns, name) {
			return nil, "podgroup " + key
		}
	}
	for key, want := range req.Expect.PodGroupMembers {
		ns, name, _ := strings.Cut(key, "/")
		have := 0
		if state, err := o.sched.Cache.PodGroupStates().Get(ns, name); err == nil {
			have = state.AllPodsCount()
		}
		if have != want {
			return nil, fmt.Sprintf("podgroup %s: %d members, %d expected", key, have, want)
		}
	}
	for _, want := range req.Expect.Nominated {
		key, node, _ := strings.Cut(want, "=")
		found := false
		for _, pi := range f.NominatedPodsForNode(node) {
			found = found || pi.GetPod().Namespace+"/"+pi.GetPod().Name == key
		}
		if !found {
			return nil, "nomination " + want
		}
	}
	return pod, ""
}

func difference(have sets.Set[string], want []string) string {
	w := sets.New(want...)
	missing, extra := sets.List(w.Difference(have)), sets.List(have.Difference(w))
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	return fmt.Sprintf("missing %v, unexpected %v", missing, extra)
}
