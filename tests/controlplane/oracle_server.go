package main

// controlplane oracle: the real kube-scheduler judging pods without scheduling them.
//
// It builds kube-scheduler exactly as `kube-scheduler` does (scheduler.New with the
// in-tree registry, the default profile or a KubeSchedulerConfiguration file, its cache
// fed by its own event handlers) but never runs the scheduling loop: its client may only
// read, so nothing is bound, evicted or written. An HTTP server on loopback answers
// POST /judge with what every plugin says about a pod on the cache's snapshot: PreFilter
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
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
)

// oracleRequest names the pod to judge (read from the informers: PostFilter's preemption
// reads it there too) or carries it whole.
type oracleRequest struct {
	// Profile is the scheduler name whose profile judges; default: the first profile.
	Profile   string  `json:"profile,omitempty"`
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Pod       *v1.Pod `json:"pod,omitempty"`
	// Expect holds the request until the snapshot shows exactly this state.
	Expect         *expectation `json:"expect,omitempty"`
	TimeoutSeconds int          `json:"timeoutSeconds,omitempty"`
}

type expectation struct {
	// Nodes: exactly these nodes.
	Nodes []string `json:"nodes"`
	// Pods: exactly these pods (namespace/name) on those nodes.
	Pods []string `json:"pods"`
	// Namespaces: at least these namespaces.
	Namespaces []string `json:"namespaces,omitempty"`
	// Services: at least these Services (namespace/name), which select pods for
	// PodTopologySpread's system default constraints.
	Services []string `json:"services,omitempty"`
	// Nominated: at least these nominations (namespace/name=node) in the queue's nominator.
	Nominated []string `json:"nominated,omitempty"`
}

type verdict struct {
	Plugin  string   `json:"plugin"`
	Code    string   `json:"code"`
	Reasons []string `json:"reasons,omitempty"`
	// NodeNames: a PreFilter result's nodes (absent: all nodes).
	NodeNames []string `json:"nodeNames,omitempty"`
}

type pluginScore struct {
	Plugin     string `json:"plugin"`
	Raw        int64  `json:"raw"`
	Normalized int64  `json:"normalized"`
	Weight     int64  `json:"weight"`
	Weighted   int64  `json:"weighted"`
}

type nodeAnswer struct {
	Node     string `json:"node"`
	Feasible bool   `json:"feasible"`
	// Status: the framework's verdict (first rejection, nominated pods counted); absent
	// for nodes PreFilter left out, whose status is the message's "didn't satisfy".
	Status *verdict `json:"status,omitempty"`
	// Filters: each filter plugin that PreFilter did not skip, called alone as the
	// framework calls them (with the nominated pods, then without when that passes).
	Filters []verdict `json:"filters,omitempty"`
	// NominatedPods: the pods nominated here that Filter counted (namespace/name).
	NominatedPods []string      `json:"nominatedPods,omitempty"`
	Scores        []pluginScore `json:"scores,omitempty"`
	TotalScore    *int64        `json:"totalScore,omitempty"`
}

type oracleAnswer struct {
	Profile     string `json:"profile"`
	NumAllNodes int    `json:"numAllNodes"`
	// PreFilter: each PreFilter plugin called alone on a fresh CycleState.
	PreFilter []verdict `json:"preFilter"`
	// PreFilterStatus: the framework's verdict over all PreFilter plugins.
	PreFilterStatus verdict      `json:"preFilterStatus"`
	Nodes           []nodeAnswer `json:"nodes"`
	Feasible        []string     `json:"feasible"`
	// Best: the feasible nodes with the highest total score, among which kube-scheduler
	// picks at random (every feasible node when only one is).
	Best          []string `json:"best"`
	Unschedulable bool     `json:"unschedulable"`
	// Message: the FailedScheduling message (FitError, PostFilter's part included).
	Message       string   `json:"message,omitempty"`
	PostFilter    *verdict `json:"postFilter,omitempty"`
	NominatedNode string   `json:"nominatedNode,omitempty"`
	// Candidates: DefaultPreemption's dry run on every node where preemption might help
	// (SelectVictimsOnNode), the nodes PostFilter picks its nomination from.
	Candidates []candidate `json:"candidates,omitempty"`
}

type candidate struct {
	Node          string   `json:"node"`
	Victims       []victim `json:"victims,omitempty"`
	PDBViolations int      `json:"pdbViolations"`
	// Status: why the node is no candidate.
	Status *verdict `json:"status,omitempty"`
}

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
	pdbs            func() ([]*policy.PodDisruptionBudget, error)
}

func runOracle(args []string) error {
	fs := flag.NewFlagSet("controlplane oracle", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server whose state is judged")
	configFile := fs.String("config", "", "KubeSchedulerConfiguration file (default: kube-scheduler's default profile)")
	listen := fs.String("listen", "127.0.0.1:0", "address of the HTTP server")
	verbosity := fs.Int("v", 0, "klog verbosity")
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
	informerFactory := scheduler.NewInformerFactory(client, 0)
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

// pluginsOf returns a profile's plugin instances by name. The runtime keeps them in an
// unexported map and offers no accessor; the oracle calls them one by one to record
// each plugin's own verdict, which the runtime only reports up to the first rejection.
func pluginsOf(f framework.Framework) (map[string]fwk.Plugin, error) {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("framework of type %T is not a struct pointer", f)
	}
	field := v.Elem().FieldByName("pluginsMap")
	want := reflect.TypeFor[map[string]fwk.Plugin]()
	if !field.IsValid() || field.Type() != want {
		return nil, fmt.Errorf("framework of type %T has no pluginsMap of %v", f, want)
	}
	m, ok := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().Interface().(map[string]fwk.Plugin)
	if !ok {
		return nil, errors.New("pluginsMap is not a map of plugins")
	}
	return m, nil
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

func toVerdict(plugin string, s *fwk.Status) verdict {
	v := verdict{Plugin: plugin, Code: s.Code().String()}
	if s != nil {
		v.Reasons = s.Reasons()
	}
	return v
}

// ownVerdict is a status with the plugin it names (a nil status is Success).
func ownVerdict(s *fwk.Status) verdict {
	if s == nil {
		return verdict{Code: fwk.Success.String()}
	}
	return toVerdict(s.Plugin(), s)
}

// cycle is schedulePod's findNodesThatFitPod and prioritizeNodes on every node (no
// percentageOfNodesToScore cut, no nominated-node shortcut), then PostFilter as
// schedulingCycle runs it when no node fits, plus each plugin's own verdicts.
func (o *oracle) cycle(ctx context.Context, f framework.Framework, profile string, snapshot *internalcache.Snapshot, pod *v1.Pod) (*oracleAnswer, error) {
	plugins := o.plugins[profile]
	enabled := f.ListPlugins()
	allNodes, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	// Empty lists, not nulls, for clients that expect arrays.
	answer := &oracleAnswer{Profile: profile, NumAllNodes: len(allNodes), PreFilter: []verdict{},
		Nodes: []nodeAnswer{}, Feasible: []string{}, Best: []string{}}
	if len(allNodes) == 0 {
		// schedulePod's first check: no FitError, so no PostFilter either.
		answer.Unschedulable = true
		answer.Message = scheduler.ErrNoNodesAvailable.Error()
		return answer, nil
	}

	for _, p := range enabled.PreFilter.Enabled {
		pl, ok := plugins[p.Name].(fwk.PreFilterPlugin)
		if !ok {
			return nil, fmt.Errorf("PreFilter plugin %q not found", p.Name)
		}
		r, s := pl.PreFilter(ctx, framework.NewCycleState(), pod, allNodes)
		v := toVerdict(p.Name, s)
		if s.IsSuccess() && !r.AllNodes() {
			v.NodeNames = sets.List(r.NodeNames)
		}
		answer.PreFilter = append(answer.PreFilter, v)
	}

	state := framework.NewCycleState()
	state.SetRecordPluginMetrics(false)
	state.Write(framework.PodsToActivateKey, framework.NewPodsToActivate())
	diagnosis := framework.Diagnosis{NodeToStatus: framework.NewDefaultNodeToStatus()}
	preRes, s, unschedulable := f.RunPreFilterPlugins(ctx, state, pod)
	answer.PreFilterStatus = ownVerdict(s)
	diagnosis.UnschedulablePlugins = unschedulable
	var feasible []fwk.NodeInfo
	if !s.IsSuccess() {
		if !s.IsRejected() {
			return nil, fmt.Errorf("PreFilter: %w", s.AsError())
		}
		diagnosis.NodeToStatus.SetAbsentNodesStatus(s)
		diagnosis.PreFilterMsg = s.Message()
		diagnosis.AddPluginStatus(s)
	} else {
		nodes := allNodes
		if !preRes.AllNodes() {
			nodes = nil
			for _, n := range allNodes {
				if preRes.NodeNames.Has(n.Node().Name) {
					nodes = append(nodes, n)
				}
			}
			diagnosis.NodeToStatus.SetAbsentNodesStatus(fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", sets.List(unschedulable))))
		}
		skipped := state.GetSkipFilterPlugins()
		for _, n := range nodes {
			name := n.Node().Name
			na := nodeAnswer{Node: name}
			status := f.RunFilterPluginsWithNominatedPods(ctx, state, pod, n)
			if status.Code() == fwk.Error {
				return nil, fmt.Errorf("Filter on %s: %w", name, status.AsError())
			}
			if status.IsSuccess() {
				na.Feasible = true
				feasible = append(feasible, n)
			} else {
				v := ownVerdict(status)
				na.Status = &v
				diagnosis.NodeToStatus.Set(name, status)
				diagnosis.AddPluginStatus(status)
			}
			added, withState, withNode, counted, err := withNominated(ctx, f, state, pod, n)
			if err != nil {
				return nil, err
			}
			na.NominatedPods = counted
			for _, p := range enabled.Filter.Enabled {
				if skipped.Has(p.Name) {
					continue
				}
				pl, ok := plugins[p.Name].(fwk.FilterPlugin)
				if !ok {
					return nil, fmt.Errorf("Filter plugin %q not found", p.Name)
				}
				// As RunFilterPluginsWithNominatedPods: with the nominated pods, and
				// without them where that passes.
				one := pl.Filter(ctx, withState, pod, withNode)
				if added && one.IsSuccess() {
					one = pl.Filter(ctx, state, pod, n)
				}
				if !one.IsSuccess() && !one.IsRejected() {
					one = fwk.AsStatus(fmt.Errorf("running %q filter plugin: %w", p.Name, one.AsError()))
				}
				na.Filters = append(na.Filters, toVerdict(p.Name, one))
			}
			answer.Nodes = append(answer.Nodes, na)
		}
	}
	for _, n := range feasible {
		answer.Feasible = append(answer.Feasible, n.Node().Name)
	}

	switch {
	case len(feasible) == 0:
		answer.Unschedulable = true
		fitErr := &framework.FitError{Pod: pod, NumAllNodes: len(allNodes), Diagnosis: diagnosis}
		if f.HasPostFilterPlugins() {
			result, ps := f.RunPostFilterPlugins(ctx, state, pod, fitErr.Diagnosis.NodeToStatus)
			fitErr.Diagnosis.PostFilterMsg = ps.Message()
			v := ownVerdict(ps)
			answer.PostFilter = &v
			if result != nil && result.NominatingInfo != nil && result.Mode() == fwk.ModeOverride {
				answer.NominatedNode = result.NominatedNodeName
			}
			if answer.Candidates, err = o.candidates(ctx, plugins, snapshot, state, pod, fitErr.Diagnosis.NodeToStatus); err != nil {
				return nil, err
			}
		}
		answer.Message = fitErr.Error()
	case len(feasible) == 1:
		// kube-scheduler takes a lone feasible node without scoring.
		answer.Best = []string{feasible[0].Node().Name}
	default:
		if err := o.score(ctx, f, plugins, enabled, state, pod, feasible, answer); err != nil {
			return nil, err
		}
	}
	return answer, nil
}

// score runs prioritizeNodes (PreScore, Score, NormalizeScore, weights) and records each
// plugin's raw score by calling it again on the same state.
func (o *oracle) score(ctx context.Context, f framework.Framework, plugins map[string]fwk.Plugin, enabled *schedulerconfig.Plugins,
	state fwk.CycleState, pod *v1.Pod, feasible []fwk.NodeInfo, answer *oracleAnswer) error {
	byName := map[string]*nodeAnswer{}
	for i := range answer.Nodes {
		byName[answer.Nodes[i].Node] = &answer.Nodes[i]
	}
	if !f.HasScorePlugins() {
		answer.Best = slices.Clone(answer.Feasible)
		return nil
	}
	if s := f.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
		return fmt.Errorf("PreScore: %w", s.AsError())
	}
	scores, s := f.RunScorePlugins(ctx, state, pod, feasible)
	if !s.IsSuccess() {
		return fmt.Errorf("Score: %w", s.AsError())
	}
	weights := map[string]int64{}
	for _, p := range enabled.Score.Enabled {
		weights[p.Name] = int64(p.Weight)
	}
	best := int64(-1)
	for i, ns := range scores {
		na := byName[ns.Name]
		if na == nil {
			return fmt.Errorf("scored node %s was not filtered", ns.Name)
		}
		for _, ps := range ns.Scores {
			pl, ok := plugins[ps.Name].(fwk.ScorePlugin)
			if !ok {
				return fmt.Errorf("Score plugin %q not found", ps.Name)
			}
			raw, rs := pl.Score(ctx, state, pod, feasible[i])
			if !rs.IsSuccess() {
				return fmt.Errorf("Score %s on %s: %w", ps.Name, ns.Name, rs.AsError())
			}
			w := weights[ps.Name]
			normalized := ps.Score
			if w != 0 {
				normalized = ps.Score / w
			}
			na.Scores = append(na.Scores, pluginScore{Plugin: ps.Name, Raw: raw, Normalized: normalized, Weight: w, Weighted: ps.Score})
		}
		total := ns.TotalScore
		na.TotalScore = &total
		switch {
		case total > best:
			best = total
			answer.Best = []string{ns.Name}
		case total == best:
			answer.Best = append(answer.Best, ns.Name)
		}
	}
	sort.Strings(answer.Best)
	return nil
}

// withNominated is kube's addGENominatedPods: the state and node with the pods nominated
// to the node of the pod's priority or higher (not the pod itself) added.
func withNominated(ctx context.Context, f framework.Framework, state fwk.CycleState, pod *v1.Pod, n fwk.NodeInfo) (bool, fwk.CycleState, fwk.NodeInfo, []string, error) {
	nominated := f.NominatedPodsForNode(n.Node().Name)
	if len(nominated) == 0 {
		return false, state, n, nil, nil
	}
	nodeOut, stateOut := n.Snapshot(), state.Clone()
	var counted []string
	for _, pi := range nominated {
		p := pi.GetPod()
		if corev1helpers.PodPriority(p) < corev1helpers.PodPriority(pod) || p.UID == pod.UID {
			continue
		}
		nodeOut.AddPodInfo(pi)
		if s := f.RunPreFilterExtensionAddPod(ctx, stateOut, pod, pi, nodeOut); !s.IsSuccess() {
			return false, state, n, nil, s.AsError()
		}
		counted = append(counted, p.Namespace+"/"+p.Name)
	}
	if len(counted) == 0 {
		return false, state, n, nil, nil
	}
	sort.Strings(counted)
	return true, stateOut, nodeOut, counted, nil
}

// candidates runs DefaultPreemption's SelectVictimsOnNode on every node where
// preemption might help (status Unschedulable), as its dry run does.
func (o *oracle) candidates(ctx context.Context, plugins map[string]fwk.Plugin, snapshot *internalcache.Snapshot,
	state fwk.CycleState, pod *v1.Pod, statuses *framework.NodeToStatus) ([]candidate, error) {
	dp, ok := plugins[defaultpreemption.Name].(*defaultpreemption.DefaultPreemption)
	if !ok {
		return nil, nil
	}
	potential, err := statuses.NodesForStatusCode(snapshot.NodeInfos(), fwk.Unschedulable)
	if err != nil {
		return nil, err
	}
	pdbs, err := o.pdbs()
	if err != nil {
		return nil, err
	}
	out := []candidate{}
	for _, n := range potential {
		c := candidate{Node: n.Node().Name}
		victims, violations, s := dp.SelectVictimsOnNode(ctx, state.Clone(), pod, n.Snapshot(), pdbs)
		switch {
		case !s.IsSuccess():
			v := toVerdict(s.Plugin(), s)
			c.Status = &v
		case len(victims) == 0:
			c.Status = &verdict{Code: fwk.Error.String(), Reasons: []string{"no victims"}}
		default:
			c.PDBViolations = violations
			for _, v := range victims {
				vi := victim{Pod: v.Namespace + "/" + v.Name, Priority: corev1helpers.PodPriority(v)}
				if v.Status.StartTime != nil {
					vi.StartTime = v.Status.StartTime.UTC().Format(time.RFC3339)
				}
				c.Victims = append(c.Victims, vi)
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}
