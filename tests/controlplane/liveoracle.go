//go:build !controlplane_skew

package main

// controlplane live-oracle: kube-scheduler's live scheduling algorithm (Scheduler.SchedulePod:
// PreFilter, Filter over a sample of the nodes from nextStartNodeIndex as
// percentageOfNodesToScore bounds it, PreScore, Score, the host picked) on clusters given
// whole, from a start index given by the caller, for several cycles in a row.
//
// One JSON request per line on stdin, one JSON answer per line on stdout. Each request
// builds kube-scheduler afresh (scheduler.New with the default profile, as enginebench.go:
// its client never connects, the informers are not started, nothing is bound), adds the
// nodes (in the order given: the cache's node tree orders them) and pods to its cache,
// updates the snapshot, sets nextStartNodeIndex and runs SchedulePod `cycles` times; each
// cycle starts where the one before left nextStartNodeIndex, as in kube-scheduler.
//
// Filter runs with parallelism 1: with more workers, which nodes kube-scheduler examines
// beyond the feasible nodes it needs depends on how its goroutines interleave, so only one
// worker gives one answer per start index. SchedulePod returns counts, not the nodes it
// found; the answer names them by filtering again from the same start, in the same order,
// and checks that this search finds as many feasible nodes and ends where SchedulePod
// left nextStartNodeIndex (else it answers an error), then scores them as prioritizeNodes
// does, for the nodes of the best total.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

type liveRequest struct {
	Nodes []*v1.Node `json:"nodes"`
	Pods  []*v1.Pod  `json:"pods"`
	Pod   *v1.Pod    `json:"pod"`
	// PercentageOfNodesToScore: 0 is kube's adaptive percentage.
	PercentageOfNodesToScore int32 `json:"percentageOfNodesToScore"`
	StartIndex               int   `json:"startIndex"`
	Cycles                   int   `json:"cycles"`
}

type liveCycle struct {
	StartIndex     int    `json:"startIndex"`
	NextStartIndex int    `json:"nextStartIndex"`
	Unschedulable  bool   `json:"unschedulable"`
	Message        string `json:"message,omitempty"`
	EvaluatedNodes int    `json:"evaluatedNodes"`
	FeasibleNodes  int    `json:"feasibleNodes"`
	// Feasible: the feasible nodes the search found, in the order found.
	Feasible []string         `json:"feasible"`
	Totals   map[string]int64 `json:"totals"`
	// Best: the feasible nodes of the highest total, among which kube picks at random.
	Best   []string `json:"best"`
	Chosen string   `json:"chosen,omitempty"`
	// RejectedAfterLast: nodes the search examined and rejected after the last feasible
	// node it kept (before the one more feasible node that stopped it).
	RejectedAfterLast int `json:"rejectedAfterLast"`
}

type liveAnswer struct {
	Cycles []liveCycle `json:"cycles,omitempty"`
	Error  string      `json:"error,omitempty"`
}

func runLiveOracle(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("no arguments expected, got %v", args)
	}
	initKlog(0)
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		var req liveRequest
		var answer liveAnswer
		if err := json.Unmarshal(line, &req); err != nil {
			answer.Error = "request: " + err.Error()
		} else if cycles, err := liveCycles(&req); err != nil {
			answer.Error = err.Error()
		} else {
			answer.Cycles = cycles
		}
		if err := out.Encode(&answer); err != nil {
			return err
		}
	}
}

// nextStartNodeIndex is the scheduler's unexported rotation index.
func nextStartNodeIndex(sched *scheduler.Scheduler) (*int, error) {
	field := reflect.ValueOf(sched).Elem().FieldByName("nextStartNodeIndex")
	if !field.IsValid() || field.Kind() != reflect.Int {
		return nil, errors.New("kube-scheduler has no nextStartNodeIndex of type int")
	}
	return (*int)(unsafe.Pointer(field.UnsafeAddr())), nil
}

func liveCycles(req *liveRequest) ([]liveCycle, error) {
	if req.Pod == nil || len(req.Nodes) == 0 {
		return nil, errors.New("a pod and nodes are required")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := klog.FromContext(ctx)
	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		return nil, err
	}
	recorders := func(string) events.EventRecorderLogger { return &events.FakeRecorder{} }
	percentage := req.PercentageOfNodesToScore
	sched, err := scheduler.New(ctx, client, scheduler.NewInformerFactory(client, 0, nil), nil, recorders,
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithPercentageOfNodesToScore(&percentage),
		scheduler.WithParallelism(1),
	)
	if err != nil {
		return nil, err
	}
	f, ok := sched.Profiles[cfg.Profiles[0].SchedulerName]
	if !ok {
		return nil, errors.New("the default profile is missing")
	}
	for _, n := range req.Nodes {
		sched.Cache.AddNode(logger, n)
	}
	for _, p := range req.Pods {
		if err := sched.Cache.AddPod(logger, p); err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	snapshot, ok := f.SnapshotSharedLister().(*internalcache.Snapshot)
	if !ok {
		return nil, fmt.Errorf("snapshot of type %T", f.SnapshotSharedLister())
	}
	if err := sched.Cache.UpdateSnapshot(logger, snapshot); err != nil {
		return nil, err
	}
	next, err := nextStartNodeIndex(sched)
	if err != nil {
		return nil, err
	}
	*next = req.StartIndex
	pi, err := framework.NewPodInfo(req.Pod)
	if err != nil {
		return nil, err
	}
	var cycles []liveCycle
	for range max(req.Cycles, 1) {
		c := liveCycle{StartIndex: *next, Feasible: []string{}, Best: []string{}, Totals: map[string]int64{}}
		state := framework.NewCycleState()
		state.SetRecordPluginMetrics(false)
		result, err := sched.SchedulePod(ctx, f, state, &framework.QueuedPodInfo{PodInfo: pi})
		var fitErr *framework.FitError
		switch {
		case errors.As(err, &fitErr):
			c.Unschedulable = true
			c.Message = fitErr.Error()
		case err != nil:
			return nil, fmt.Errorf("cycle %d: %w", len(cycles), err)
		default:
			c.Chosen = result.SuggestedHost
			c.EvaluatedNodes = result.EvaluatedNodes
			c.FeasibleNodes = result.FeasibleNodes
		}
		c.NextStartIndex = *next
		if err := sampled(ctx, f, snapshot, req.Pod, &c); err != nil {
			return nil, fmt.Errorf("cycle %d: %w", len(cycles), err)
		}
		cycles = append(cycles, c)
	}
	return cycles, nil
}

// sampled names the feasible nodes SchedulePod found from c.StartIndex (checked against
// its counts and the index it left) and scores them as prioritizeNodes does.
func sampled(ctx context.Context, f framework.Framework, snapshot *internalcache.Snapshot, pod *v1.Pod, c *liveCycle) error {
	nodes, err := snapshot.ListNodesInPlacement()
	if err != nil {
		return err
	}
	state := framework.NewCycleState()
	state.SetRecordPluginMetrics(false)
	preRes, s, _ := f.RunPreFilterPlugins(ctx, state, pod)
	if !s.IsSuccess() {
		if c.Unschedulable && s.IsRejected() {
			return nil
		}
		return fmt.Errorf("PreFilter: %v", s.AsError())
	}
	if !preRes.AllNodes() {
		return errors.New("PreFilter narrowed the nodes down: kube-scheduler's order of them is a map's")
	}
	n := len(nodes)
	var feasible []fwk.NodeInfo
	processed, lastKept := n, -1
	for i := range n {
		node := nodes[(c.StartIndex+i)%n]
		status := f.RunFilterPluginsWithNominatedPods(ctx, state, pod, node)
		if status.Code() == fwk.Error {
			return fmt.Errorf("Filter on %s: %v", node.Node().Name, status.AsError())
		}
		if !status.IsSuccess() {
			continue
		}
		if !c.Unschedulable && len(feasible) == c.FeasibleNodes {
			// One feasible node more than needed stops kube's search, uncounted.
			processed = i
			break
		}
		feasible = append(feasible, node)
		lastKept = i
	}
	if lastKept >= 0 {
		c.RejectedAfterLast = processed - lastKept - 1
	}
	if c.Unschedulable && len(feasible) > 0 {
		return fmt.Errorf("SchedulePod found no node, filtering again found %d", len(feasible))
	}
	if want := (c.StartIndex + processed) % n; want != c.NextStartIndex {
		return fmt.Errorf("filtering again examined %d nodes from %d (next index %d), SchedulePod left the next index at %d",
			processed, c.StartIndex, want, c.NextStartIndex)
	}
	if !c.Unschedulable && len(feasible) != c.FeasibleNodes {
		return fmt.Errorf("SchedulePod found %d feasible nodes, filtering again %d", c.FeasibleNodes, len(feasible))
	}
	for _, node := range feasible {
		c.Feasible = append(c.Feasible, node.Node().Name)
	}
	switch len(feasible) {
	case 0:
		return nil
	case 1:
		// kube-scheduler takes a lone feasible node without scoring.
		c.Best = []string{c.Feasible[0]}
		return nil
	}
	if s := f.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
		return fmt.Errorf("PreScore: %v", s.AsError())
	}
	scores, s := f.RunScorePlugins(ctx, state, pod, feasible)
	if !s.IsSuccess() {
		return fmt.Errorf("Score: %v", s.AsError())
	}
	best := int64(-1)
	for _, ns := range scores {
		c.Totals[ns.Name] = ns.TotalScore
		switch {
		case ns.TotalScore > best:
			best = ns.TotalScore
			c.Best = []string{ns.Name}
		case ns.TotalScore == best:
			c.Best = append(c.Best, ns.Name)
		}
	}
	sort.Strings(c.Best)
	return nil
}
