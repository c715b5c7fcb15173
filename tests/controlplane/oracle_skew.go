//go:build controlplane_skew

package main

// The control planes of older minors (`make controlplane-v1.34`, ...; the Makefile's
// controlplane_skew tag) are built from the same sources without the oracle, the live
// oracle and the engine benchmark: they call kube-scheduler's internals as v1.37 has them.

import (
	"fmt"

	"k8s.io/component-base/version"
)

func v137Only(command string) error {
	return fmt.Errorf("%s needs the v1.37 build (`make controlplane`, .build/controlplane): this one is built from Kubernetes v%s", command, version.DefaultKubeBinaryVersion)
}

func runOracle([]string) error { return v137Only("oracle") }

func runLiveOracle([]string) error { return v137Only("live-oracle") }

func runEngineBench([]string) error { return v137Only("engine-bench") }
