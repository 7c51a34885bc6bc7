package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// MaxHeaderBytes bounds the request headers NewServer's servers read; a
// request with more gets 431 Request Header Fields Too Large from net/http
// before any handler runs.
const MaxHeaderBytes = 64 << 10

// NewProxy returns a reverse proxy to upstream. The upstream sees the
// inbound X-Forwarded-For chain with the gateway's peer appended, and
// X-Forwarded-Host and -Proto; its own rate limit headers are dropped so a
// client only ever sees the gateway's account of its budget. An upstream
// that cannot be reached is a 502 problem document, and one that does not
// answer within the transport's response timeout a 504. Its Transport is
// Upstream{}.Transport(), a keep-alive pool sized for a gateway; set it to
// another Upstream's for other sizes, timeouts or TLS files. logger may be
// nil.
func NewProxy(upstream *url.URL, logger *slog.Logger) *httputil.ReverseProxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &httputil.ReverseProxy{
		Transport: Upstream{}.transport(nil),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			// Rewrite drops the inbound chain; keep it, as a Director
			// would, and let SetXForwarded append this hop.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			for _, h := range rateHeaders {
				resp.Header.Del(h)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				// The client went away; there is nobody to answer.
				return
			}
			logger.LogAttrs(r.Context(), slog.LevelError, "upstream request failed",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				WriteError(w, newError(http.StatusGatewayTimeout, "the upstream service did not answer in time", err))
				return
			}
			WriteError(w, newError(http.StatusBadGateway, "the upstream service could not be reached", err))
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Timeouts of the servers NewServer returns.
const (
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, headers and body,
	// unless the server's ReadTimeout is changed: long enough for an upload
	// of tens of megabytes on a slow link.
	DefaultReadTimeout = time.Minute
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout = 2 * time.Minute
)

// NewServer returns an http.Server for h with limits fit for the public
// side of a gateway: headers capped at MaxHeaderBytes and read within
// ReadHeaderTimeout, the whole request with its body read within
// DefaultReadTimeout (change the returned server's ReadTimeout for another
// bound, or 0 for none), and idle connections closed after IdleTimeout, so
// a client that sends slowly or not at all cannot hold a connection
// forever. Writing the response is not bounded, since a proxied download
// may rightly take long: a client that stops reading holds its connection
// until TCP gives up on it. logger may be nil.
func NewServer(h http.Handler, logger *slog.Logger) *http.Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Serve serves srv on ln until ctx is done, then stops accepting and waits
// up to grace for the requests in flight to finish, logging one line to
// logger (nil logs nothing) as that drain begins. It returns nil after a
// clean shutdown, or the error that stopped the server or the shutdown.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration, logger *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if logger != nil {
		logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "draining: no new connections, waiting for requests in flight",
			slog.String("addr", ln.Addr().String()), slog.Int64("timeout_ms", grace.Milliseconds()))
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		srv.Close()
		return fmt.Errorf("gateway: shut down %s within %v: %w", ln.Addr(), grace, err)
	}
	return nil
}

// Health returns a handler that reports the gateway is serving, with the
// hash and version of the rule set in force; 503 while there is none.
func Health(src RuleSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Status       string `json:"status"`
			RulesHash    string `json:"rules_hash,omitempty"`
			RulesVersion int64  `json:"rules_version,omitempty"`
		}
		body.Status = "ok"
		status := http.StatusOK
		if set := src.Current(); set == nil {
			body.Status, status = "no rules", http.StatusServiceUnavailable
		} else {
			body.RulesHash, body.RulesVersion = set.Hash, set.Version
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(body)
	})
}

// readyTimeout bounds one readiness check's look at the shared store, and
// readyFor is how long its answer is reused: /readyz may be on the API's
// public address, and a client asking it in a loop must not turn each of
// its requests into a PING of every Redis node.
const (
	readyTimeout = time.Second
	readyFor     = 500 * time.Millisecond
)

// Ready returns a handler for readiness checks (/readyz): 200
// {"status":"ready"} while down reports nothing, else 503
// {"status":"degraded","down":[...]} naming what down reports, the shared
// store's nodes that do not answer (pipeline.Pipeline.Down). A degraded
// gateway still serves, from its local limits (fail-closed limits
// refuse); this tells a load balancer or an operator so. Health stays the
// liveness check. down is called with a context bounded by a second, at
// most once per half second whoever asks (callers meanwhile share its
// answer); nil down is always ready.
func Ready(down func(ctx context.Context) []string) http.Handler {
	rd := &readiness{down: down}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Status string   `json:"status"`
			Down   []string `json:"down,omitempty"`
		}
		body.Status = "ready"
		status := http.StatusOK
		if down != nil {
			body.Down = rd.check(r.Context())
		}
		if len(body.Down) > 0 {
			body.Status, status = "degraded", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(body)
	})
}

// readiness is Ready's last answer, reused for readyFor.
type readiness struct {
	down func(ctx context.Context) []string
	mu   sync.Mutex // held during a check, so that callers share it
	at   time.Time  // when last was read; guarded by mu
	last []string   // guarded by mu
}

// check returns the nodes down, as read less than readyFor ago or now. A
// caller that goes away does not cut the check short for the others.
func (rd *readiness) check(ctx context.Context) []string {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.at.IsZero() && time.Since(rd.at) < readyFor {
		return rd.last
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	rd.last, rd.at = rd.down(cctx), time.Now()
	return rd.last
}
