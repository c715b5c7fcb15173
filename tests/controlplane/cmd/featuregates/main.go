// Command featuregates prints the feature gates kube-scheduler of this module's Kubernetes
// release knows (every gate registered in its process-wide feature gate: kube's own,
// the API server's, client-go's and component-base's), one per line as
// `name<TAB>default<TAB>prerelease<TAB>locked<TAB>dependencies`, sorted: the table the agent's
// --feature-gates is checked against (shared/src/config/feature_gates.tsv, written by
// `make feature-gates`).
package main

import (
	"fmt"
	"sort"
	"strings"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	// kube-scheduler's own process registers these (cmd/kube-scheduler/app/server.go).
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/pkg/features"
)

func main() {
	gate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	all := gate.GetAll()
	deps := gate.Dependencies()
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		spec := all[featuregate.Feature(name)]
		var needs []string
		for _, d := range deps[featuregate.Feature(name)] {
			needs = append(needs, string(d))
		}
		sort.Strings(needs)
		stage := string(spec.PreRelease)
		if spec.PreRelease == featuregate.GA {
			stage = "GA"
		}
		fmt.Printf("%s\t%t\t%s\t%t\t%s\n", name, spec.Default, stage, spec.LockToDefault, strings.Join(needs, ","))
	}
}
