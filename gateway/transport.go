package gateway

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// Defaults of Upstream's fields.
const (
	// DefaultUpstreamIdleConns is how many idle keep-alive connections to
	// the upstream are kept: a few hundred requests in flight at once (3,000
	// a second answered within 100 ms) reuse their connections rather than
	// open new ones.
	DefaultUpstreamIdleConns = 256
	// DefaultUpstreamDialTimeout bounds opening a TCP connection.
	DefaultUpstreamDialTimeout = 5 * time.Second
	// DefaultUpstreamTLSTimeout bounds the TLS handshake.
	DefaultUpstreamTLSTimeout = 5 * time.Second
	// DefaultUpstreamResponseTimeout bounds the wait for the response's
	// headers once the request is sent (the body may stream for longer).
	DefaultUpstreamResponseTimeout = 30 * time.Second
	// DefaultUpstreamIdleTimeout closes a keep-alive connection idle that
	// long. Keep it below the upstream's own idle timeout, so that the
	// gateway, not the upstream, closes an idle connection.
	DefaultUpstreamIdleTimeout = 90 * time.Second
)

// Upstream says how a gateway reaches its upstream: the pool of keep-alive
// connections, the timeouts and TLS. The zero value gives the defaults
// above; a negative duration means no bound.
type Upstream struct {
	// IdleConns is how many idle connections are kept for reuse. Zero
	// means DefaultUpstreamIdleConns.
	IdleConns int
	// MaxConns bounds the connections open at once, idle or busy; requests
	// beyond it wait for one. Zero means no bound.
	MaxConns int
	// DialTimeout bounds opening a connection. Zero means
	// DefaultUpstreamDialTimeout.
	DialTimeout time.Duration
	// TLSTimeout bounds the TLS handshake. Zero means
	// DefaultUpstreamTLSTimeout.
	TLSTimeout time.Duration
	// ResponseTimeout bounds the wait for the response's headers after the
	// request is written; past it the client gets 504. Zero means
	// DefaultUpstreamResponseTimeout.
	ResponseTimeout time.Duration
	// IdleTimeout closes a connection idle for that long. Zero means
	// DefaultUpstreamIdleTimeout.
	IdleTimeout time.Duration
	// TLS are the files for an https upstream. Zero trusts the system's
	// authorities and presents no client certificate.
	TLS UpstreamTLS
}

// UpstreamTLS names the files that set up TLS to an https upstream. Every
// field may be empty. Certificates are always verified.
type UpstreamTLS struct {
	// CA is a PEM file of the authorities the upstream's certificate must
	// chain to. Empty trusts the system's authorities.
	CA string
	// Cert and Key are the PEM files of the client certificate the
	// gateway presents, for an upstream that requires one. Both or
	// neither.
	Cert, Key string
	// ServerName is the name the upstream's certificate must hold. Empty
	// means the upstream URL's host.
	ServerName string
}

// IsZero reports whether t names nothing.
func (t UpstreamTLS) IsZero() bool { return t == UpstreamTLS{} }

// config loads the files and returns the TLS configuration they describe,
// TLS 1.2 or later. Errors name the file at fault and why.
func (t UpstreamTLS) config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("upstream TLS authority: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream TLS authority %s: holds no PEM certificate", t.CA)
		}
	}
	if (t.Cert == "") != (t.Key == "") {
		return nil, fmt.Errorf("upstream TLS client certificate %q and key %q: give both or neither", t.Cert, t.Key)
	}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("upstream TLS client certificate %s and key %s: %w", t.Cert, t.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Transport returns an http.Transport to the upstream that u describes, for
// a ReverseProxy's Transport. Go's default transport keeps 2 idle
// connections per host, so a gateway under load would open a connection
// for most requests; this one keeps IdleConns. Proxies named in the
// environment (HTTPS_PROXY, NO_PROXY) apply, as they do by default. Errors
// name the TLS file at fault.
func (u Upstream) Transport() (*http.Transport, error) {
	switch {
	case u.IdleConns < 0:
		return nil, fmt.Errorf("upstream: %d idle connections: must not be negative", u.IdleConns)
	case u.MaxConns < 0:
		return nil, fmt.Errorf("upstream: at most %d connections: must not be negative", u.MaxConns)
	}
	tlsConfig, err := u.TLS.config()
	if err != nil {
		return nil, err
	}
	return u.transport(tlsConfig), nil
}

// transport is Transport with the TLS configuration already loaded.
func (u Upstream) transport(tlsConfig *tls.Config) *http.Transport {
	idle := cmp.Or(u.IdleConns, DefaultUpstreamIdleConns)
	dialer := &net.Dialer{Timeout: bound(u.DialTimeout, DefaultUpstreamDialTimeout), KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   bound(u.TLSTimeout, DefaultUpstreamTLSTimeout),
		ResponseHeaderTimeout: bound(u.ResponseTimeout, DefaultUpstreamResponseTimeout),
		IdleConnTimeout:       bound(u.IdleTimeout, DefaultUpstreamIdleTimeout),
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          idle,
		MaxIdleConnsPerHost:   idle,
		MaxConnsPerHost:       u.MaxConns,
		// A TLSClientConfig of our own turns HTTP/2 off unless asked for.
		ForceAttemptHTTP2: true,
	}
}

// bound is d, def when d is zero, and 0 (no bound, to net/http) when d is
// negative.
func bound(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}
