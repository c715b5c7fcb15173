//go:build !controlplane_skew

package main

// The oracle's wire: what POST /judge is asked and what it answers.

import (
	v1 "k8s.io/api/core/v1"
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
	// PodGroups: at least these PodGroups (namespace/name).
	PodGroups []string `json:"podGroups,omitempty"`
	// PodGroupMembers: exactly this many members of each PodGroup (namespace/name) in the
	// cache's pod group states, which GangScheduling counts.
	PodGroupMembers map[string]int `json:"podGroupMembers,omitempty"`
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
	// PreEnqueue: each PreEnqueue plugin called alone, as the queue calls them before it
	// takes the pod in (GangScheduling holds a PodGroup's member until the group and
	// minCount members exist).
	PreEnqueue []verdict `json:"preEnqueue"`
	// Permit: each Permit plugin called alone on a fresh CycleState as if the pod were
	// placed on its first best node (GangScheduling: wait until minCount members are
	// scheduled); absent when no node fits.
	Permit []verdict `json:"permit,omitempty"`
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
