//go:build controlplane_v1_34

package main

import (
	"k8s.io/apimachinery/pkg/util/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientgofeaturegate "k8s.io/client-go/features"
	"k8s.io/component-base/featuregate"
)

// controllerManagerGates: v1.34's kube-controller-manager turns client-go's WatchListClient
// on (off by default before v1.35) when its options make their flags, and panics when a
// flag set already holds the gates, as the in-process kube-apiserver's does. Done here
// first, the same override; the gates being process-global, the in-process API server's
// and kube-scheduler's clients get it too (a watch-list the server does not serve falls
// back to list and watch).
func controllerManagerGates() error {
	watchList := featuregate.Feature(clientgofeaturegate.WatchListClient)
	if utilfeature.DefaultFeatureGate.Enabled(watchList) {
		return nil
	}
	return utilfeature.DefaultMutableFeatureGate.OverrideDefaultAtVersion(watchList, true, version.MustParse("1.34"))
}
