// Package conformance runs Kubernetes' own scheduling end-to-end specs
// (k8s.io/kubernetes/test/e2e/scheduling) against whatever cluster --kubeconfig names,
// assembled as test/e2e/e2e_test.go assembles e2e.test, with only the scheduling packages
// compiled in. `make conformance` (cargo test -p mcsched-e2e --test conformance) builds it
// with `go test -c` and runs it twice on the same cluster shape: once with kube-scheduler
// as the default scheduler, once with mcsched-agent.
package conformance

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"

	// define and freeze constants
	_ "k8s.io/kubernetes/test/e2e/feature"

	// test sources: sig-scheduling's specs
	_ "k8s.io/kubernetes/test/e2e/scheduling"

	// reconfigure framework, as e2e.test does
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestScheduling(t *testing.T) {
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	klog.Infof("Starting e2e run %q on Ginkgo node %d", framework.RunID, suiteConfig.ParallelProcess)
	ginkgo.RunSpecs(t, "Kubernetes scheduling e2e suite", suiteConfig, reporterConfig)
}

// The suite set-up of test/e2e/e2e.go, less what needs a provider or system pods: every
// node schedulable, the count of ready schedulable nodes known to the specs.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	return nil
}, func(ctx context.Context, data []byte) {})
