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
// kubeconfig embeds.
type pki struct {
	dir          string
	caCert       string
	caKey        string
	servingCert  string
	servingKey   string
	saKey        string
	saPub        string
	caPEM        []byte
	adminCertPEM []byte
	adminKeyPEM  []byte
}

func generatePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		dir:         dir,
		caCert:      filepath.Join(dir, "ca.crt"),
		caKey:       filepath.Join(dir, "ca.key"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
	}
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mcsched-test-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pemBlock("CERTIFICATE", caDER)
	if err := writeKey(p.caKey, caKey); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.caCert, p.caPEM, 0o600); err != nil {
		return nil, err
	}

	issue := func(serial int64, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, []byte, error) {
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

	srvCert, srvKey, err := issue(2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")})
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
	return p, nil
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
