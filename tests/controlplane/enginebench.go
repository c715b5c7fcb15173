//go:build !controlplane_skew

package main

// controlplane engine-bench: kube-scheduler's scheduling algorithm for one pod, timed on
// the cluster mcsched's engine benchmark (agent/benches/schedule_one.rs) builds: 5000
// nodes holding 10000 pods, the default profile, every node scored
// (percentageOfNodesToScore 100). It is the same call kube-scheduler's scheduling cycle
// makes after UpdateSnapshot (Scheduler.SchedulePod: PreFilter, Filter, PreScore, Score,
// NormalizeScore, the host picked), so the two engines are compared on equal work.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

const (
	benchNodes = 5000
	benchPods  = 10000
	// Existing pods with scheduler_perf's anti-affinity term, on nodes 0..benchAntiAffine.
	benchAntiAffine = 1000
)

type engineCase struct {
	name string
	pod  *v1.Pod
}

func runEngineBench(args []string) error {
	fs := flag.NewFlagSet("controlplane engine-bench", flag.ContinueOnError)
	filter := fs.String("bench", "", "run only the cases whose name contains this")
	count := fs.Int("count", 5, "timed runs of about a second each per case; their median is reported")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the runs to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *count < 1 {
		return fmt.Errorf("--count must be at least 1, not %d", *count)
	}
	if *cpuProfile != "" {
		out, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer func() { _ = out.Close() }()
		if err := pprof.StartCPUProfile(out); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	initKlog(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sched, f, err := benchScheduler(ctx)
	if err != nil {
		return err
	}
	cases := []engineCase{
		{"schedule_one_5000_nodes_10000_pods", benchPod("incoming", "")},
		{"schedule_one_anti_affinity_5000_nodes_10000_pods", antiAffine(benchPod("incoming", ""))},
		{"schedule_one_two_spread_constraints_5000_nodes_10000_pods", spread(benchPod("incoming", ""))},
	}
	for _, c := range cases {
		if !strings.Contains(c.name, *filter) {
			continue
		}
		pi, err := framework.NewPodInfo(c.pod)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		once := func() (scheduler.ScheduleResult, error) {
			return sched.SchedulePod(ctx, f, framework.NewCycleState(), &framework.QueuedPodInfo{PodInfo: pi})
		}
		// A benchmark of a failing cycle measures nothing.
		first, err := once()
		if err != nil {
			return fmt.Errorf("%s: the pod does not fit: %w", c.name, err)
		}
		var failed error
		perOp := make([]int64, 0, *count)
		runs := 0
		for range *count {
			res := testing.Benchmark(func(b *testing.B) {
				for b.Loop() {
					if _, err := once(); err != nil {
						failed = err
					}
				}
			})
			if failed != nil {
				return fmt.Errorf("%s: %w", c.name, failed)
			}
			perOp = append(perOp, res.NsPerOp())
			runs += res.N
		}
		slices.Sort(perOp)
		fmt.Printf("%s\t%d feasible nodes\t%d cycles\t%d ns/op median of %d\t[%d, %d]\n", c.name,
			first.FeasibleNodes, runs, perOp[len(perOp)/2], len(perOp), perOp[0], perOp[len(perOp)-1])
	}
	return nil
}

// benchScheduler is kube-scheduler with the default profile, its cache holding the
// benchmark's cluster and its snapshot updated from it. Its client never connects: the
// informers are not started and nothing is bound.
func benchScheduler(ctx context.Context) (*scheduler.Scheduler, framework.Framework, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, nil, err
	}
	all := int32(100)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		return nil, nil, err
	}
	informerFactory := scheduler.NewInformerFactory(client, 0, nil)
	recorders := func(string) events.EventRecorderLogger { return &events.FakeRecorder{} }
	sched, err := scheduler.New(ctx, client, informerFactory, nil, recorders,
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithPercentageOfNodesToScore(&all),
		scheduler.WithParallelism(cfg.Parallelism),
	)
	if err != nil {
		return nil, nil, err
	}
	f, ok := sched.Profiles[cfg.Profiles[0].SchedulerName]
	if !ok {
		return nil, nil, errors.New("the default profile is missing")
	}
	logger := klog.FromContext(ctx)
	for i := range benchNodes {
		sched.Cache.AddNode(logger, benchNode(i))
	}
	for i := range benchPods {
		p := benchPod(fmt.Sprintf("p%d", i), fmt.Sprintf("node-%d", i%benchNodes))
		if i < benchAntiAffine {
			p = antiAffine(p)
		}
		if err := sched.Cache.AddPod(logger, p); err != nil {
			return nil, nil, err
		}
	}
	snapshot, ok := f.SnapshotSharedLister().(*internalcache.Snapshot)
	if !ok {
		return nil, nil, fmt.Errorf("snapshot of type %T", f.SnapshotSharedLister())
	}
	if err := sched.Cache.UpdateSnapshot(logger, snapshot); err != nil {
		return nil, nil, err
	}
	return sched, f, nil
}

func benchNode(i int) *v1.Node {
	name := fmt.Sprintf("node-%d", i)
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Labels: map[string]string{
			"kubernetes.io/hostname":      name,
			"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3),
		}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("32"),
			v1.ResourceMemory: resource.MustParse("128Gi"),
			v1.ResourcePods:   resource.MustParse("110"),
		}},
	}
}

func benchPod(name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name),
			Labels: map[string]string{"app": "bench"}},
		Spec: v1.PodSpec{
			NodeName: node,
			Containers: []v1.Container{{
				Name:  "c",
				Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
					v1.ResourceCPU:    resource.MustParse("100m"),
					v1.ResourceMemory: resource.MustParse("500Mi"),
				}},
			}},
		},
	}
}

func benchSelector(key, value string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
}

// antiAffine: a green pod that no other green pod may share a hostname with.
func antiAffine(p *v1.Pod) *v1.Pod {
	p.Labels["color"] = "green"
	p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
			LabelSelector: benchSelector("color", "green"),
			TopologyKey:   "kubernetes.io/hostname",
		}},
	}}
	return p
}

func spread(p *v1.Pod) *v1.Pod {
	constraint := func(key string, when v1.UnsatisfiableConstraintAction) v1.TopologySpreadConstraint {
		return v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: when,
			LabelSelector: benchSelector("app", "bench")}
	}
	p.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{
		constraint("topology.kubernetes.io/zone", v1.DoNotSchedule),
		constraint("kubernetes.io/hostname", v1.ScheduleAnyway),
	}
	return p
}
