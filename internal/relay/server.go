package relay

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Store is what the relay leases from: in production a lease.Store
	// over the guarded Redis store whose Fleet is the number of relays
	// (pipeline.New builds it), so that each relay leases its share of
	// 100 ms of a limit. Required.
	Store lease.Leaser
	// Held, if set, reports the lease entries and the tokens the relay
	// holds, for the metrics (lease.Store.Held).
	Held func() (entries int, tokens int64)
	// Token is the bearer token gateways present. New refuses an empty
	// one unless TrustedNetwork is set.
	Token string
	// TrustedNetwork serves without a token: only for a network where
	// nothing but gateways reaches the relay.
	TrustedNetwork bool
	// Timeout bounds the work on one request. Zero means 1s.
	Timeout time.Duration
	// Logger receives refused requests at debug level. Nil discards.
	Logger *slog.Logger
	// Registerer receives the relay's metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Server is the relay's HTTP handler: it answers LeasePath from its
// Store. It is safe for concurrent use and owns no goroutine.
type Server struct {
	store   lease.Leaser
	sum     [32]byte // the token's SHA-256; compared in constant time
	open    bool     // TrustedNetwork with no token
	timeout time.Duration
	log     *slog.Logger
	m       *serverMetrics
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a Server answering from cfg.Store.
func NewServer(cfg ServerConfig) (*Server, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("relay: no store to lease from")
	case cfg.Token == "" && !cfg.TrustedNetwork:
		return nil, errors.New("relay: no token: anyone who reaches the relay could take tokens from every limit; set one, or TrustedNetwork")
	case cfg.Token != "" && len(cfg.Token) < 16:
		return nil, fmt.Errorf("relay: token is %d bytes, want at least 16", len(cfg.Token))
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("relay: timeout %v is negative", cfg.Timeout)
	}
	s := &Server{store: cfg.Store, sum: sha256.Sum256([]byte(cfg.Token)), open: cfg.Token == "",
		timeout: cmp.Or(cfg.Timeout, time.Second), log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))}
	var err error
	if s.m, err = newServerMetrics(cfg.Registerer, cfg.Held); err != nil {
		return nil, err
	}
	return s, nil
}

// ServeHTTP answers a POST of a LeaseRequest to LeasePath with a
// LeaseResponse, 401 without the token, 400 for a request beyond the
// protocol's bounds, 413 for a body larger than MaxBodyBytes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, err := s.serve(w, r)
	s.m.done(code)
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "relay request refused", slog.Int("status", code), slog.Any("error", err))
		if code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-relay"`)
		}
		http.Error(w, err.Error(), code)
	}
}

// serve answers r, or returns the status and error to answer with.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) (int, error) {
	switch {
	case r.URL.Path == "/healthz":
		// Alive: the relay holds nothing a restart would need.
		w.WriteHeader(http.StatusOK)
		return http.StatusOK, nil
	case r.URL.Path != LeasePath:
		return http.StatusNotFound, fmt.Errorf("relay: no such path %q (want %s)", r.URL.Path, LeasePath)
	case r.Method != http.MethodPost:
		return http.StatusMethodNotAllowed, fmt.Errorf("relay: method %s: want POST", r.Method)
	case !s.authorized(r):
		return http.StatusUnauthorized, errors.New("relay: missing or unknown bearer token")
	}
	var req LeaseRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err := dec.Decode(&req); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return http.StatusRequestEntityTooLarge, fmt.Errorf("relay: body larger than %d bytes", MaxBodyBytes)
		}
		return http.StatusBadRequest, fmt.Errorf("relay: body is not a lease request: %w", err)
	}
	if len(req.Takes) > MaxTakes {
		return http.StatusBadRequest, fmt.Errorf("relay: %d takes in one request, more than %d", len(req.Takes), MaxTakes)
	}
	reqs := make([]*limit.Request, len(req.Takes))
	for i := range req.Takes {
		var err error
		if reqs[i], err = req.Takes[i].request(); err != nil {
			return http.StatusBadRequest, fmt.Errorf("relay: takes[%d]: %w", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	resp := LeaseResponse{Grants: make([]Grant, len(reqs))}
	// The takes are answered at once: quiet keys go to Redis together,
	// where the Redis client pipelines them per shard.
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			t0 := time.Now()
			g, err := s.store.Lease(ctx, reqs[i], req.Takes[i].Want)
			s.m.granted(g.Granted, time.Since(t0))
			resp.Grants[i] = grantOf(g, err)
		})
	}
	wg.Wait()
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&resp); err != nil {
		s.log.LogAttrs(ctx, slog.LevelDebug, "relay answer not sent", slog.Any("error", err))
	}
	return http.StatusOK, nil
}

// authorized reports whether r carries the token (or none is needed).
func (s *Server) authorized(r *http.Request) bool {
	if s.open {
		return true
	}
	auth := r.Header.Get("Authorization")
	// The scheme is case-insensitive (RFC 9110, section 11.1).
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "Bearer ") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimLeft(auth[7:], " ")))
	return subtle.ConstantTimeCompare(sum[:], s.sum[:]) == 1
}
