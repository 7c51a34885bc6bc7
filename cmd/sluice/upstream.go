package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/sluice-rl/sluice/gateway"
)

// upstreamFlags are the flags that say how the gateway reaches its
// --upstream: the keep-alive pool, the timeouts and TLS.
type upstreamFlags struct {
	idleConns, maxConns                int
	dial, tlsHandshake, response, idle time.Duration
	tls                                gateway.UpstreamTLS
}

// addUpstreamFlags registers the upstream connection flags on fs, to land
// in f.
func addUpstreamFlags(fs *flag.FlagSet, f *upstreamFlags) {
	fs.IntVar(&f.idleConns, "upstream-idle-conns", gateway.DefaultUpstreamIdleConns, "idle keep-alive connections to the upstream kept for reuse; about the requests in flight at once")
	fs.IntVar(&f.maxConns, "upstream-max-conns", 0, "bound on the connections to the upstream, idle or busy (requests beyond it wait); 0 for none")
	fs.DurationVar(&f.dial, "upstream-dial-timeout", gateway.DefaultUpstreamDialTimeout, "bound on opening a connection to the upstream; 0 for none")
	fs.DurationVar(&f.tlsHandshake, "upstream-tls-timeout", gateway.DefaultUpstreamTLSTimeout, "bound on the TLS handshake with the upstream; 0 for none")
	fs.DurationVar(&f.response, "upstream-response-timeout", gateway.DefaultUpstreamResponseTimeout, "bound on the wait for the upstream's response headers (then 504); 0 for none")
	fs.DurationVar(&f.idle, "upstream-idle-timeout", gateway.DefaultUpstreamIdleTimeout, "close an upstream connection idle this long; keep it below the upstream's own keep-alive timeout")
	fs.StringVar(&f.tls.CA, "upstream-tls-ca", "", "PEM `file` of the authorities an https upstream's certificate must chain to; empty trusts the system's")
	fs.StringVar(&f.tls.Cert, "upstream-tls-cert", "", "PEM `file` of the client certificate to present to an https upstream that requires one")
	fs.StringVar(&f.tls.Key, "upstream-tls-key", "", "PEM `file` of the client certificate's key")
	fs.StringVar(&f.tls.ServerName, "upstream-tls-server-name", "", "`name` the upstream's certificate must hold; empty means the --upstream host")
}

// upstreamHandler returns what answers allowed requests: the reverse proxy
// to the --upstream URL raw over the transport f describes, or without one
// the built-in answer. Errors name the flag at fault.
func upstreamHandler(raw string, f *upstreamFlags, logger *slog.Logger) (http.Handler, error) {
	if raw == "" {
		if !f.tls.IsZero() {
			return nil, errors.New("--upstream-tls-* need --upstream")
		}
		return http.HandlerFunc(builtinAnswer), nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--upstream %q: want an http or https URL with a host", raw)
	}
	if u.Scheme != "https" && !f.tls.IsZero() {
		return nil, fmt.Errorf("--upstream-tls-* need an https --upstream, not %q", raw)
	}
	switch {
	case f.idleConns < 1:
		return nil, fmt.Errorf("--upstream-idle-conns %d: want at least 1", f.idleConns)
	case f.maxConns < 0:
		return nil, fmt.Errorf("--upstream-max-conns %d: want 0 (no bound) or more", f.maxConns)
	case f.dial < 0 || f.tlsHandshake < 0 || f.response < 0 || f.idle < 0:
		return nil, errors.New("--upstream-*-timeout: want 0 (no bound) or a positive duration")
	}
	// A flag's 0, "no bound", is the Upstream's negative duration.
	none := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	tr, err := gateway.Upstream{IdleConns: f.idleConns, MaxConns: f.maxConns, DialTimeout: none(f.dial), TLSTimeout: none(f.tlsHandshake),
		ResponseTimeout: none(f.response), IdleTimeout: none(f.idle), TLS: f.tls}.Transport()
	if err != nil {
		return nil, fmt.Errorf("--upstream-tls-*: %w", err)
	}
	p := gateway.NewProxy(u, logger)
	p.Transport = tr
	return p, nil
}
