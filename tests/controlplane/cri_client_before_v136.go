//go:build controlplane_v1_34 || controlplane_v1_35

package main

import (
	"context"
	"time"

	noopt "go.opentelemetry.io/otel/trace/noop"
	cri "k8s.io/cri-api/pkg/apis"
	criremote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

// newRuntimeService connects to a CRI runtime with cri-client as v1.34 and v1.35 have it:
// no context, the logger passed instead.
func newRuntimeService(ctx context.Context, endpoint string, timeout time.Duration) (cri.RuntimeService, error) {
	logger := klog.FromContext(ctx)
	return criremote.NewRemoteRuntimeService(endpoint, timeout, noopt.NewTracerProvider(), &logger)
}
