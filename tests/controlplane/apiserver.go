package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// runAPIServer runs kube-apiserver until ctx ends. TLS, client certificates and the RBAC
// authorizer are on, so RBAC rules under test are really enforced.
func runAPIServer(ctx context.Context, cfg config, dataDir string, port int, etcdURL string, p *pki) error {
	// There is no kubelet: TaintNodesByCondition would taint every hand-made Node
	// not-ready forever, and ServiceAccount admission would refuse pods until a
	// controller-manager creates the default ServiceAccount in each namespace. Real nodes
	// need ServiceAccount admission: it mounts the pods' API token.
	disabledAdmission := "--disable-admission-plugins=TaintNodesByCondition,ServiceAccount"
	if cfg.realNodes {
		disabledAdmission = "--disable-admission-plugins=TaintNodesByCondition"
	}
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + cfg.bindAddress,
		"--advertise-address=" + cfg.bindAddress,
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(dataDir, "apiserver-certs"),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--client-ca-file=" + p.caCert,
		// Towards kubelets (logs, exec) as the cluster admin, as kubeadm's
		// apiserver-kubelet-client is.
		"--kubelet-client-certificate=" + p.adminCert,
		"--kubelet-client-key=" + p.adminKey,
		// Aggregated APIs as kubeadm serves them: the aggregator proxies to extension API
		// servers with the front-proxy client certificate and names the user in
		// X-Remote-* headers, which they trust because kube-apiserver publishes these
		// settings in kube-system/extension-apiserver-authentication.
		"--requestheader-client-ca-file=" + p.frontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.frontProxyCert,
		"--proxy-client-key-file=" + p.frontProxyKey,
		// There is no kube-proxy to route a Service's cluster IP: the aggregator dials an
		// address from the APIService's Service's EndpointSlices instead.
		"--enable-aggregator-routing=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=10.0.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		disabledAdmission,
		// Benchmarks create thousands of objects a second through one loopback server.
		"--max-requests-inflight=2000",
		"--max-mutating-requests-inflight=1000",
		"--watch-cache=true",
	}
	if cfg.auditLog != "" {
		policy := filepath.Join(dataDir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return err
		}
		args = append(args, "--audit-log-path="+cfg.auditLog, "--audit-policy-file="+policy,
			"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0")
	}
	if cfg.featureGates != "" {
		args = append(args, "--feature-gates="+cfg.featureGates)
		if gv := workloadAPI(); gv != "" && strings.Contains(cfg.featureGates, "GenericWorkload=true") {
			args = append(args, "--runtime-config="+gv+"=true")
		}
	}
	if cfg.compactionInterval > 0 {
		args = append(args, "--etcd-compaction-interval="+cfg.compactionInterval.String())
	}
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	return app.Run(ctx, completed)
}

// workloadAPI is the group version of the Workload API in the release this binary is
// built from, which kube-apiserver serves only when asked (runtime-config) and with the
// GenericWorkload gate on: v1alpha1 in v1.35 (Workloads only, their pod groups inline),
// v1alpha2 in v1.36 (Workloads and PodGroups), v1beta1 from v1.37 (which removed
// v1alpha2); "" for v1.34, which has none.
func workloadAPI() string {
	switch version.DefaultKubeBinaryVersion {
	case "1.34":
		return ""
	case "1.35":
		return "scheduling.k8s.io/v1alpha1"
	case "1.36":
		return "scheduling.k8s.io/v1alpha2"
	default:
		return "scheduling.k8s.io/v1beta1"
	}
}

// auditPolicy records every write, whoever sends it and whatever the answer (creates,
// updates, patches, deletes, bindings, status, events, Leases), with its user, user agent
// and times: what the fault-injection tests attribute to a replica and its leadership.
// Reads are not recorded.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`
