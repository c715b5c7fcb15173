package main

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// runRemovePods stops and removes every pod sandbox of a CRI runtime, as `crictl rmp -fa`
// does (Debian has no crictl): containerd kills the containers, calls CNI DEL, removes the
// network namespace and unmounts the root filesystems, so a test node leaves nothing
// behind once its containerd stops.
//
//	controlplane remove-pods --container-runtime-endpoint unix:///path/containerd.sock
func runRemovePods(args []string) error {
	fs := flag.NewFlagSet("controlplane remove-pods", flag.ContinueOnError)
	endpoint := fs.String("container-runtime-endpoint", "", "CRI endpoint, unix:///path/to/containerd.sock")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" {
		return fmt.Errorf("--container-runtime-endpoint is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rs, err := newRuntimeService(ctx, *endpoint, 10*time.Second)
	if err != nil {
		return err
	}
	sandboxes, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var failed error
	for _, s := range sandboxes {
		if err := rs.StopPodSandbox(ctx, s.Id); err != nil {
			failed = fmt.Errorf("stopping pod sandbox %s (%s/%s): %w", s.Id, s.Metadata.GetNamespace(), s.Metadata.GetName(), err)
			continue
		}
		if err := rs.RemovePodSandbox(ctx, s.Id); err != nil {
			failed = fmt.Errorf("removing pod sandbox %s (%s/%s): %w", s.Id, s.Metadata.GetNamespace(), s.Metadata.GetName(), err)
		}
	}
	fmt.Printf("removed %d pod sandboxes\n", len(sandboxes))
	return failed
}
