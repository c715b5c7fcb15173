package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func writeKubeconfig(path, name, url string, p *pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: p.caPEM}
	cfg.AuthInfos[name+"-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: p.adminCertPEM, ClientKeyData: p.adminKeyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name + "-admin"}
	cfg.CurrentContext = name
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Written to a temporary file and renamed, so a reader never sees half a kubeconfig.
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(*cfg, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func adminClient(kubeconfig string, qps float64, burst int) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS = float32(qps)
	rc.Burst = burst
	return kubernetes.NewForConfig(rc)
}

// waitReady polls /readyz, which includes the RBAC bootstrap post-start hook, so the
// default ClusterRoles exist by the time READY is printed.
func waitReady(ctx context.Context, c kubernetes.Interface, apiErr <-chan error) error {
	deadline := time.After(120 * time.Second)
	for {
		var status int
		res := c.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if res.Error() == nil && status == http.StatusOK {
			return nil
		}
		select {
		case err := <-apiErr:
			return fmt.Errorf("kube-apiserver stopped before it was ready: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("kube-apiserver not ready after 120s: %v", res.Error())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func labelsEverything() labels.Selector { return labels.Everything() }
