package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/cli"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// kubeletConfig is what `controlplane kubelet` needs to run a real kubelet as one node of
// a control plane that `controlplane` started.
type kubeletConfig struct {
	clusterKubeconfig string
	pkiDir            string
	nodeName          string
	nodeIP            string
	rootDir           string
	runtimeEndpoint   string
	cgroupRoot        string
	port              int
	maxPods           int
	verbosity         int
}

func parseKubeletFlags(args []string) (kubeletConfig, error) {
	var c kubeletConfig
	fs := flag.NewFlagSet("controlplane kubelet", flag.ContinueOnError)
	fs.StringVar(&c.clusterKubeconfig, "cluster-kubeconfig", "", "the control plane's admin kubeconfig (its server and CA are used)")
	fs.StringVar(&c.pkiDir, "pki-dir", "", "the control plane's certificate directory (ca.crt, ca.key): the node's credentials are signed there")
	fs.StringVar(&c.nodeName, "node-name", "", "name of the Node")
	fs.StringVar(&c.nodeIP, "node-ip", "", "the node's address (its InternalIP; the kubelet serves there)")
	fs.StringVar(&c.rootDir, "root-dir", "", "the kubelet's own directory (pods, volumes, logs, credentials)")
	fs.StringVar(&c.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint, unix:///path/to/containerd.sock")
	fs.StringVar(&c.cgroupRoot, "cgroup-root", "", "cgroup (in every v1 hierarchy) under which the kubelet puts the pods")
	fs.IntVar(&c.port, "port", 0, "the kubelet's HTTPS port (0 picks a free one)")
	fs.IntVar(&c.maxPods, "max-pods", 110, "pods the node accepts")
	fs.IntVar(&c.verbosity, "v", 0, "klog verbosity")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for flagName, v := range map[string]string{
		"--cluster-kubeconfig": c.clusterKubeconfig, "--pki-dir": c.pkiDir, "--node-name": c.nodeName,
		"--node-ip": c.nodeIP, "--root-dir": c.rootDir, "--container-runtime-endpoint": c.runtimeEndpoint,
		"--cgroup-root": c.cgroupRoot,
	} {
		if v == "" {
			return c, fmt.Errorf("%s is required", flagName)
		}
	}
	if net.ParseIP(c.nodeIP) == nil {
		return c, fmt.Errorf("--node-ip %q is not an IP address", c.nodeIP)
	}
	return c, nil
}

// runKubelet runs the real kubelet (k8s.io/kubernetes/cmd/kubelet/app, the same modules as
// the control plane) in this process until SIGTERM. It registers Node nodeName with a
// client certificate of its own (system:node:<name>, so the Node authorizer applies),
// talks CRI to the given containerd, and keeps everything it writes under rootDir and its
// pods' cgroups under cgroupRoot, so several kubelets (one per test cluster) share a host.
func runKubelet(args []string) error {
	c, err := parseKubeletFlags(args)
	if err != nil {
		return err
	}
	rootDir, err := filepath.Abs(c.rootDir)
	if err != nil {
		return err
	}
	c.rootDir = rootDir
	if c.port == 0 {
		if c.port, err = freePort(); err != nil {
			return err
		}
	}
	for _, d := range []string{"pki", "logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(rootDir, d), 0o750); err != nil {
			return err
		}
	}
	kubeconfig, err := writeNodeCredentials(c)
	if err != nil {
		return fmt.Errorf("node credentials: %w", err)
	}
	configFile, err := writeKubeletConfig(c)
	if err != nil {
		return fmt.Errorf("kubelet configuration: %w", err)
	}
	cmd := app.NewKubeletCommand(context.Background())
	cmd.SetArgs([]string{
		"--config=" + configFile,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + rootDir,
		"--cert-dir=" + filepath.Join(rootDir, "pki"),
		"--hostname-override=" + c.nodeName,
		"--node-ip=" + c.nodeIP,
		"--node-labels=" + realKubeletLabel + "=true",
		fmt.Sprintf("--v=%d", c.verbosity),
	})
	fmt.Printf("KUBELET %s %s:%d\n", c.nodeName, c.nodeIP, c.port)
	if code := cli.Run(cmd); code != 0 {
		return fmt.Errorf("kubelet exited with code %d", code)
	}
	return nil
}

// writeKubeletConfig writes the KubeletConfiguration for this machine kind: cgroup v1 with
// cgroupfs (no systemd), swap tolerated, the test's own containerd, every path under the
// kubelet's root, thresholds low enough that a busy build disk never evicts test pods.
func writeKubeletConfig(c kubeletConfig) (string, error) {
	caFile := filepath.Join(c.pkiDir, "ca.crt")
	cfg := kubeletv1beta1.KubeletConfiguration{
		Address:           c.nodeIP,
		Port:              int32(c.port),
		ReadOnlyPort:      0,
		HealthzPort:       ptr.To[int32](0),
		TLSCertFile:       filepath.Join(c.rootDir, "pki", "kubelet.crt"),
		TLSPrivateKeyFile: filepath.Join(c.rootDir, "pki", "kubelet.key"),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: caFile},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		// No systemd on this machine kind, and its cgroups are v1, which the kubelet
		// refuses by default since 1.35 (KEP-5573) unless told otherwise.
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               c.cgroupRoot,
		CgroupsPerQOS:            ptr.To(true),
		FailCgroupV1:             ptr.To(false),
		FailSwapOn:               ptr.To(false),
		ContainerRuntimeEndpoint: c.runtimeEndpoint,
		PodLogsDir:               filepath.Join(c.rootDir, "logs"),
		VolumePluginDir:          filepath.Join(c.rootDir, "volume-plugins"),
		// Pods get no DNS: there is no cluster DNS, and the host's resolvers are not
		// reachable from pod networks (the test node keeps pods on the machine).
		ResolverConfig: ptr.To(""),
		ClusterDomain:  "cluster.local",
		MaxPods:        int32(c.maxPods),
		RegisterNode:   ptr.To(true),
		// The node's nftables table (made by the test harness) is all the host gets: no
		// KUBE-FIREWALL and canary chains left behind in the host's iptables.
		MakeIPTablesUtilChains: ptr.To(false),
		// A developer's disk fills up with build outputs: evict nothing until it is full,
		// and never collect the imported images (nothing could pull them back).
		EvictionHard: map[string]string{
			"memory.available":  "50Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
			"nodefs.inodesFree": "1%",
		},
		MergeDefaultEvictionSettings: ptr.To(false),
		ImageGCHighThresholdPercent:  ptr.To[int32](100),
		ImageGCLowThresholdPercent:   ptr.To[int32](99),
		// Tests watch status changes: report them promptly.
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 10 * time.Second},
		SyncFrequency:             metav1.Duration{Duration: 10 * time.Second},
	}
	cfg.APIVersion = kubeletv1beta1.SchemeGroupVersion.String()
	cfg.Kind = "KubeletConfiguration"
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.rootDir, "config.yaml")
	return path, os.WriteFile(path, out, 0o600)
}

// writeNodeCredentials signs the node's client certificate (system:node:<name> in
// system:nodes, as the Node authorizer expects) and serving certificate with the cluster
// CA, and writes the kubeconfig the kubelet uses.
func writeNodeCredentials(c kubeletConfig) (string, error) {
	admin, err := clientcmd.LoadFromFile(c.clusterKubeconfig)
	if err != nil {
		return "", err
	}
	adminCtx := admin.Contexts[admin.CurrentContext]
	if adminCtx == nil || admin.Clusters[adminCtx.Cluster] == nil {
		return "", fmt.Errorf("%s has no current context and cluster", c.clusterKubeconfig)
	}
	cluster := admin.Clusters[adminCtx.Cluster]
	ca, caKey, err := loadCA(c.pkiDir)
	if err != nil {
		return "", err
	}
	pkiDir := filepath.Join(c.rootDir, "pki")
	clientCert := filepath.Join(pkiDir, "kubelet-client.crt")
	clientKey := filepath.Join(pkiDir, "kubelet-client.key")
	if err := signTo(ca, caKey, clientCert, clientKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + c.nodeName, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return "", err
	}
	if err := signTo(ca, caKey, filepath.Join(pkiDir, "kubelet.crt"), filepath.Join(pkiDir, "kubelet.key"), &x509.Certificate{
		Subject:     pkix.Name{CommonName: c.nodeName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{c.nodeName},
		IPAddresses: []net.IP{net.ParseIP(c.nodeIP)},
	}); err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: cluster.Server, CertificateAuthorityData: cluster.CertificateAuthorityData}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: clientCert, ClientKey: clientKey}
	cfg.Contexts["node"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "node"}
	cfg.CurrentContext = "node"
	path := filepath.Join(c.rootDir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, nil, err
	}
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || keyBlock == nil {
		return nil, nil, errors.New("the CA certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func signTo(ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now
	tmpl.NotAfter = now.Add(365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}
