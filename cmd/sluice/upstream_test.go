package main

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestUpstreamTLSFlags: the gateway process reaches an https upstream that
// requires a client certificate through the --upstream-tls-* flags, and
// keeps the upstream's answer for an allowed request.
func TestUpstreamTLSFlags(t *testing.T) {
	certs := redistest.NewCerts(t)
	pair, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusForbidden)
			return
		}
		io.WriteString(w, "over tls as "+r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	upstream.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert}
	upstream.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	upstream.StartTLS()
	defer upstream.Close()

	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--upstream", upstream.URL,
		"--upstream-tls-ca", certs.CA, "--upstream-tls-cert", certs.ClientCert, "--upstream-tls-key", certs.ClientKey,
		"--upstream-idle-conns", "8", "--upstream-response-timeout", "2s")
	resp, body := get(t, "GET", p.URL+"/", "X-API-Key", "demo")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "over tls as") {
		t.Fatalf("status %d body %q, want 200 from the upstream over TLS", resp.StatusCode, body)
	}
}
