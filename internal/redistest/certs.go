package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are the PEM files of a throwaway public key infrastructure made
// for one test: a certificate authority, a certificate for 127.0.0.1 and
// "localhost" signed by it that serves as both a server and a client
// certificate (Redis cluster nodes present theirs to each other), a client
// certificate for the code under test, and a second, unrelated authority
// that trusts none of them.
type Certs struct {
	Dir        string // the directory holding every file
	CA         string // the authority's certificate
	ServerCert string // signed by CA; IP SAN 127.0.0.1 and ::1, DNS SAN localhost
	ServerKey  string
	ClientCert string // signed by CA; for mutual TLS
	ClientKey  string
	OtherCA    string // an authority that signed nothing here
}

// NewCerts writes a fresh set of Certs into a temporary directory that is
// removed when the test ends. It fails the test if any step fails. Keys are
// ECDSA P-256, which is quick to generate.
func NewCerts(t TB) Certs {
	t.Helper()
	c, err := WriteCerts(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// WriteCerts writes a fresh set of Certs into dir, for TestMain.
func WriteCerts(dir string) (Certs, error) {
	c := Certs{
		Dir:        dir,
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"),
		ServerKey:  filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"),
		ClientKey:  filepath.Join(dir, "client.key"),
		OtherCA:    filepath.Join(dir, "other-ca.crt"),
	}
	ca, caKey, err := newCA("redistest CA", c.CA)
	if err != nil {
		return Certs{}, err
	}
	if _, _, err := newCA("redistest unrelated CA", c.OtherCA); err != nil {
		return Certs{}, err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if err := newLeaf(server, ca, caKey, c.ServerCert, c.ServerKey); err != nil {
		return Certs{}, err
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "sluice"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := newLeaf(client, ca, caKey, c.ClientCert, c.ClientKey); err != nil {
		return Certs{}, err
	}
	return c, nil
}

func newCA(name, certFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make key of %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("read back %s: %w", name, err)
	}
	return cert, key, writePEM(certFile, "CERTIFICATE", der)
}

func newLeaf(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("make key of %s: %w", tmpl.Subject.CommonName, err)
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key of %s: %w", tmpl.Subject.CommonName, err)
	}
	return writePEM(keyFile, "PRIVATE KEY", kder)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writePEM(file, kind string, der []byte) error {
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}
