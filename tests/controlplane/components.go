package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// runControllerManager runs the real kube-controller-manager with its default controllers
// (Deployments, ReplicaSets, StatefulSets, the PV binder, node lifecycle with taint-based
// eviction, ServiceAccount tokens, garbage collector, ...).
func runControllerManager(ctx context.Context, cfg config, p *pki) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range s.Flags(kcm.KnownControllers(), kcm.ControllersDisabledByDefault(), kcm.ControllerAliases()).FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{
		"--kubeconfig=" + cfg.kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file=" + p.saKey,
		"--root-ca-file=" + p.caCert,
		"--cluster-signing-cert-file=" + p.caCert,
		"--cluster-signing-key-file=" + p.caKey,
		"--use-service-account-credentials=false",
		fmt.Sprintf("--kube-api-qps=%g", cfg.clientQPS),
		fmt.Sprintf("--kube-api-burst=%d", cfg.clientBurst),
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	c, err := s.Config(ctx, kcm.KnownControllers(), kcm.ControllersDisabledByDefault(), kcm.ControllerAliases())
	if err != nil {
		return err
	}
	return kcm.Run(ctx, c.Complete())
}

// runScheduler runs the real kube-scheduler with its default profile, `default-scheduler`.
func runScheduler(ctx context.Context, cfg config, dataDir string) error {
	path := filepath.Join(dataDir, "kube-scheduler.yaml")
	conf := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %g
  burst: %d
leaderElection:
  leaderElect: false
`, cfg.kubeconfig, cfg.clientQPS, cfg.clientBurst)
	if cfg.schedulerProfiles != "" {
		profiles, err := os.ReadFile(cfg.schedulerProfiles)
		if err != nil {
			return err
		}
		conf += string(profiles)
	}
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return err
	}
	opts := scheduleroptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse([]string{"--config=" + path, "--secure-port=0"}); err != nil {
		return err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	cc, sched, err := scheduler.Setup(ctx, opts)
	if err != nil {
		return err
	}
	return scheduler.Run(ctx, cc, sched)
}
