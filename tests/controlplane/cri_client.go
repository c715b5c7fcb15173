//go:build !controlplane_v1_34 && !controlplane_v1_35

package main

import (
	"context"
	"time"

	noopt "go.opentelemetry.io/otel/trace/noop"
	cri "k8s.io/cri-api/pkg/apis"
	criremote "k8s.io/cri-client/pkg"
)

// newRuntimeService connects to a CRI runtime with cri-client as v1.36 and later have it
// (cri_client_before_v136.go: v1.34 and v1.35).
func newRuntimeService(ctx context.Context, endpoint string, timeout time.Duration) (cri.RuntimeService, error) {
	return criremote.NewRemoteRuntimeService(ctx, endpoint, timeout, noopt.NewTracerProvider(), false)
}
