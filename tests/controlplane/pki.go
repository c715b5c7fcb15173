package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the files kube-apiserver and the components read, and the PEM bytes the
// kubeconfig embeds. As in a kubeadm cluster, the front proxy (the aggregator, calling
// extension API servers) has a CA of its own, which those servers trust for the
// X-Remote-* request headers only, never for client certificates in general.
type pki struct {
	dir              string
	caCert           string
	caKey            string
	servingCert      string
	servingKey       string
	adminCert        string
	adminKey         string
	frontProxyCACert string
	frontProxyCAKey  string
	frontProxyCert   string
	frontProxyKey    string
	saKey            string
	saPub            string
	caPEM            []byte
	adminCertPEM     []byte
	adminKeyPEM      []byte
}

// generatePKI writes the cluster's certificates; kube-apiserver's serving certificate is
// valid for bindAddress too.
func generatePKI(dir, bindAddress string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		dir:         dir,
		caCert:      filepath.Join(dir, "ca.crt"),
		caKey:       filepath.Join(dir, "ca.key"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		adminCert:   filepath.Join(dir, "admin.crt"),
		adminKey:    filepath.Join(dir, "admin.key"),
		// kubeadm's names for the front proxy's CA and client certificate.
		frontProxyCACert: filepath.Join(dir, "front-proxy-ca.crt"),
		frontProxyCAKey:  filepath.Join(dir, "front-proxy-ca.key"),
		frontProxyCert:   filepath.Join(dir, "front-proxy-client.crt"),
		frontProxyKey:    filepath.Join(dir, "front-proxy-client.key"),
		saKey:            filepath.Join(dir, "sa.key"),
		saPub:            filepath.Join(dir, "sa.pub"),
	}
	// A restart on the same data directory keeps the cluster's identity: the CA, the
	// ServiceAccount signing key and the certificates its clients hold.
	if reused, err := p.reuse(); err != nil || reused {
		return p, err
	}
	now := time.Now().Add(-time.Hour)
	// newCA makes a self-signed CA and writes its certificate and key.
	newCA := func(cn, certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: cn},
			NotBefore:             now,
			NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, nil, nil, err
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, nil, err
		}
		certPEM := pemBlock("CERTIFICATE", der)
		if err := writeKey(keyPath, key); err != nil {
			return nil, nil, nil, err
		}
		if err := os.WriteFile(certPath, certPEM, 0o600); err != nil {
			return nil, nil, nil, err
		}
		return cert, key, certPEM, nil
	}
	ca, caKey, caPEM, err := newCA("mcsched-test-ca", p.caCert, p.caKey)
	if err != nil {
		return nil, err
	}
	p.caPEM = caPEM
	frontProxyCA, frontProxyCAKey, _, err := newCA("front-proxy-ca", p.frontProxyCACert, p.frontProxyCAKey)
	if err != nil {
		return nil, err
	}

	// issueBy signs a leaf certificate with the given CA.
	issueBy := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subject,
			NotBefore:    now,
			NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
	}
	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, []byte, error) {
		return issueBy(ca, caKey, serial, subject, usage, dns, ips)
	}

	srvCert, srvKey, err := issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		apiserverIPs(bindAddress))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingCert, srvCert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingKey, srvKey, 0o600); err != nil {
		return nil, err
	}
	// system:masters: the admin identity the tests and in-process components use.
	p.adminCertPEM, p.adminKeyPEM, err = issue(3, pkix.Name{CommonName: "mcsched-admin", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, err
	}
	// Also on disk, so a test can call a component directly with the admin's identity.
	if err := os.WriteFile(p.adminCert, p.adminCertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.adminKey, p.adminKeyPEM, 0o600); err != nil {
		return nil, err
	}
	// The aggregator's identity towards extension API servers (--proxy-client-cert-file):
	// they accept its X-Remote-* headers only from a certificate the front-proxy CA signed
	// with this name (--requestheader-allowed-names).
	fpCert, fpKey, err := issueBy(frontProxyCA, frontProxyCAKey, 2, pkix.Name{CommonName: "front-proxy-client"},
		x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.frontProxyCert, fpCert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.frontProxyKey, fpKey, 0o600); err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKey, pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)), 0o600); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPub, pemBlock("PUBLIC KEY", pubDER), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, complete), nil, 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// complete marks a data directory whose certificates were all written.
const complete = "complete"

// reuse loads the certificates an earlier run wrote; false when there are none.
func (p *pki) reuse() (bool, error) {
	if _, err := os.Stat(filepath.Join(p.dir, complete)); err != nil {
		return false, nil
	}
	var err error
	if p.caPEM, err = os.ReadFile(p.caCert); err != nil {
		return false, err
	}
	if p.adminCertPEM, err = os.ReadFile(p.adminCert); err != nil {
		return false, err
	}
	if p.adminKeyPEM, err = os.ReadFile(p.adminKey); err != nil {
		return false, err
	}
	return true, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pemBlock("EC PRIVATE KEY", der), 0o600)
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

// apiserverIPs: loopback, the `kubernetes` Service's cluster IP and the bind address.
func apiserverIPs(bindAddress string) []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")}
	if ip := net.ParseIP(bindAddress); ip != nil && !ip.Equal(ips[0]) && !ip.IsUnspecified() {
		ips = append(ips, ip)
	}
	return ips
}
