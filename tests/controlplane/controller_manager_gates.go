//go:build !controlplane_v1_34

package main

// controllerManagerGates changes the process-global feature gates as kube-controller-manager's
// options do when they make their flags, before any flag set holds the gates: nothing to do
// from v1.35 (controller_manager_gates_v134.go: v1.34).
func controllerManagerGates() error { return nil }
