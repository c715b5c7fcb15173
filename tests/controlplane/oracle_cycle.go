//go:build !controlplane_skew

package main

// The oracle's cycle: schedulePod's filter and score on every node, PostFilter's
// candidates, each plugin's own verdict.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
)

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
	answer := &oracleAnswer{Profile: profile, NumAllNodes: len(allNodes), PreEnqueue: []verdict{}, PreFilter: []verdict{},
		Nodes: []nodeAnswer{}, Feasible: []string{}, Best: []string{}}
	for _, p := range enabled.PreEnqueue.Enabled {
		pl, ok := plugins[p.Name].(fwk.PreEnqueuePlugin)
		if !ok {
			return nil, fmt.Errorf("PreEnqueue plugin %q not found", p.Name)
		}
		answer.PreEnqueue = append(answer.PreEnqueue, toVerdict(p.Name, pl.PreEnqueue(ctx, pod)))
	}
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
	if len(answer.Best) > 0 {
		if answer.Permit, err = o.permit(ctx, plugins, enabled, pod, answer.Best[0]); err != nil {
			return nil, err
		}
	}
	return answer, nil
}

// permit calls each Permit plugin alone, on a fresh CycleState, for the pod on node (the
// pod is not assumed: GangScheduling counts the members the cache holds as scheduled).
// GangScheduling's Permit activates the group's unscheduled members in the queue, which
// the oracle never pops, and allows waiting pods, of which the oracle has none.
func (o *oracle) permit(ctx context.Context, plugins map[string]fwk.Plugin, enabled *schedulerconfig.Plugins, pod *v1.Pod, node string) ([]verdict, error) {
	var out []verdict
	for _, p := range enabled.Permit.Enabled {
		pl, ok := plugins[p.Name].(fwk.PermitPlugin)
		if !ok {
			return nil, fmt.Errorf("Permit plugin %q not found", p.Name)
		}
		s, _ := pl.Permit(ctx, framework.NewCycleState(), pod, node)
		out = append(out, toVerdict(p.Name, s))
	}
	return out, nil
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
		// As DryRunPreemption: the possible victims from the shared NodeInfo (with
		// GenericWorkload a PodGroup's members across nodes are one victim), the
		// selection on a copy of it.
		possible, err := dp.Evaluator.GetVictimsOnNode(ctx, n)
		if err != nil {
			return nil, err
		}
		victims, violations, s := dp.SelectVictimsOnNode(ctx, state.Clone(), pod, n.Snapshot(), possible, pdbs)
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
