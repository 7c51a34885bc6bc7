package gateway_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestUpstreamReusesConnections: requests through the gateway, one after
// another and 20 at a time, reuse a few keep-alive connections to the
// upstream rather than open one each (Go's default transport keeps 2 idle
// connections, so 20 at a time would open hundreds).
func TestUpstreamReusesConnections(t *testing.T) {
	var opened atomic.Int64
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	upstream.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	upstream.Start()
	defer upstream.Close()
	front := httptest.NewServer(gateway.NewProxy(mustURL(t, upstream.URL), nil))
	defer front.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	get := func() error {
		resp, err := client.Get(front.URL + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return &statusError{resp.StatusCode}
		}
		return nil
	}

	const sequential, workers, each = 200, 20, 30
	for range sequential {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	if got := opened.Load(); got > 2 {
		t.Errorf("%d requests one after another: the upstream accepted %d connections, want 1 or 2", sequential, got)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				if err := get(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := opened.Load(); got > 2*workers {
		t.Errorf("%d more requests, %d at a time: the upstream accepted %d connections in all, want at most %d", workers*each, workers, got, 2*workers)
	}
	t.Logf("%d requests: %d upstream connections", sequential+workers*each, opened.Load())
}

// proxyOver serves NewProxy to upstream, over u's transport, until the
// test ends.
func proxyOver(t *testing.T, upstream string, u gateway.Upstream, logger *slog.Logger) *httptest.Server {
	t.Helper()
	proxy := gateway.NewProxy(mustURL(t, upstream), logger)
	tr, err := u.Transport()
	if err != nil {
		t.Fatal(err)
	}
	proxy.Transport = tr
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	return front
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "status " + http.StatusText(e.code) }

// TestUpstreamResponseTimeout: an upstream that accepts the request and
// never answers gets the client a 504 once the response timeout passes.
func TestUpstreamResponseTimeout(t *testing.T) {
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer upstream.Close()
	defer close(release)
	front := proxyOver(t, upstream.URL, gateway.Upstream{ResponseTimeout: 100 * time.Millisecond}, nil)
	resp, body := doURL(t, "GET", front.URL+"/")
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", resp.StatusCode)
	}
	if p := decodeProblem(t, resp, body); p.Detail != "the upstream service did not answer in time" {
		t.Errorf("detail %q, want the upstream's silence named", p.Detail)
	}
}

// TestUpstreamTLS: an https upstream whose certificate chains to the
// --upstream-tls-ca file, and that requires a client certificate, is
// reached; without the authority, or without the client certificate, the
// client gets 502 and the log says why.
func TestUpstreamTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	serverPair, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(caPEM)
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "over tls")
	}))
	upstream.TLS = &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert}
	upstream.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	upstream.StartTLS()
	defer upstream.Close()

	for _, tc := range []struct {
		name   string
		tls    gateway.UpstreamTLS
		status int
		log    string
	}{
		{"authority and client certificate", gateway.UpstreamTLS{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}, http.StatusOK, ""},
		{"another name than the certificate's", gateway.UpstreamTLS{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey, ServerName: "api.example"}, http.StatusBadGateway, "certificate is valid for"},
		{"no authority", gateway.UpstreamTLS{Cert: certs.ClientCert, Key: certs.ClientKey}, http.StatusBadGateway, "certificate signed by unknown authority"},
		{"another authority", gateway.UpstreamTLS{CA: certs.OtherCA, Cert: certs.ClientCert, Key: certs.ClientKey}, http.StatusBadGateway, "certificate signed by unknown authority"},
		{"no client certificate", gateway.UpstreamTLS{CA: certs.CA}, http.StatusBadGateway, "certificate required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			var mu sync.Mutex
			logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
			front := proxyOver(t, upstream.URL, gateway.Upstream{TLS: tc.tls}, logger)
			resp, body := doURL(t, "GET", front.URL+"/")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.log != "" && !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log %q, want it to say %q", logs.String(), tc.log)
			}
		})
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestUpstreamTransportRejects: TLS files that cannot be used, and
// negative sizes, are errors naming the problem.
func TestUpstreamTransportRejects(t *testing.T) {
	certs := redistest.NewCerts(t)
	for _, tc := range []struct {
		name string
		u    gateway.Upstream
		want string
	}{
		{"missing authority file", gateway.Upstream{TLS: gateway.UpstreamTLS{CA: certs.Dir + "/nope.crt"}}, "upstream TLS authority: open " + certs.Dir + "/nope.crt"},
		{"authority file without a certificate", gateway.Upstream{TLS: gateway.UpstreamTLS{CA: certs.ServerKey}}, "holds no PEM certificate"},
		{"certificate without a key", gateway.Upstream{TLS: gateway.UpstreamTLS{Cert: certs.ClientCert}}, "give both or neither"},
		{"key that does not match", gateway.Upstream{TLS: gateway.UpstreamTLS{Cert: certs.ClientCert, Key: certs.ServerKey}}, "private key does not match public key"},
		{"negative idle connections", gateway.Upstream{IdleConns: -1}, "-1 idle connections"},
		{"negative connection bound", gateway.Upstream{MaxConns: -2}, "at most -2 connections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.u.Transport()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
