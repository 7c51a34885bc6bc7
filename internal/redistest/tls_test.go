package redistest_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestStandaloneTLS checks the TLS port against Go's own TLS client: it
// serves the test's server certificate, wants a client certificate when
// ClientAuth is set, and answers RESP; a server started without TLS has no
// TLS address.
func TestStandaloneTLS(t *testing.T) {
	if got := redistest.Standalone(t).TLSAddr(); got != "" {
		t.Errorf("TLSAddr of a plaintext server = %q, want empty", got)
	}
	certs := redistest.NewCerts(t)
	srv := redistest.StandaloneTLS(t, redistest.TLS{Certs: certs, ClientAuth: true})
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	ping := func(cfg *tls.Config) (string, error) {
		conn, err := tls.Dial("tcp", srv.TLSAddr(), cfg)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(conn).ReadString('\n')
	}
	if got, err := ping(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}); err != nil || got != "+PONG\r\n" {
		t.Errorf("PING over mutual TLS = %q, %v; want +PONG", got, err)
	}
	if got, err := ping(&tls.Config{RootCAs: roots}); err == nil {
		t.Errorf("PING without a client certificate = %q, want an error", got)
	}
	if _, err := ping(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: x509.NewCertPool()}); err == nil {
		t.Error("TLS with no trusted authority succeeded, want an unknown authority error")
	}
}
