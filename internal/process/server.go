package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// Limits of the servers NewServer returns.
const (
	// MaxHeaderBytes bounds a request's headers; a request with more gets
	// 431 Request Header Fields Too Large before any handler runs.
	MaxHeaderBytes = 64 << 10
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, headers and body,
	// unless the server's ReadTimeout is changed: long enough for an upload
	// of tens of megabytes on a slow link.
	DefaultReadTimeout = time.Minute
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout = 2 * time.Minute
)

// NewServer returns an http.Server for h with limits fit for a public
// address: headers capped at MaxHeaderBytes and read within
// ReadHeaderTimeout, the whole request with its body read within
// DefaultReadTimeout (change the returned server's ReadTimeout for another
// bound, or 0 for none), and idle connections closed after IdleTimeout, so
// a client that sends slowly or not at all cannot hold a connection
// forever. Writing the response is not bounded, since a proxied download
// may rightly take long. The server's own errors go to logger at level
// warn; nil discards them.
func NewServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(cmp.Or(logger, slog.New(slog.DiscardHandler)).Handler(), slog.LevelWarn),
	}
}

// Server is what Run serves and drains; *http.Server is one.
type Server interface {
	// Serve serves on ln until the server is shut down or closed. After
	// Shutdown or Close it returns nil or http.ErrServerClosed.
	Serve(ln net.Listener) error
	// Shutdown stops accepting and waits for the work in flight until it
	// ends or ctx does, and then returns ctx's error.
	Shutdown(ctx context.Context) error
	// Close ends the work still in flight after a Shutdown that timed out.
	Close() error
}

// Endpoint is a server and the listener it serves on.
type Endpoint struct {
	Server   Server
	Listener net.Listener
}

// Run serves every endpoint until ctx is done or one of them fails, and
// then drains them all: it logs one line at level info that draining
// began, with the addresses and the timeout in timeout_ms, and shuts every
// server down at once within grace, closing those that have not drained
// by then. It returns nil after a clean drain, else the first error: a
// server that failed, or one that did not drain within grace. The
// listeners are closed when it returns. logger may be nil.
func Run(ctx context.Context, grace time.Duration, logger *slog.Logger, eps ...Endpoint) error {
	logger = cmp.Or(logger, slog.New(slog.DiscardHandler))
	served := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			err := ep.Server.Serve(ep.Listener)
			if err == nil || errors.Is(err, http.ErrServerClosed) {
				served <- nil
				return
			}
			served <- fmt.Errorf("serve on %s: %w", ep.Listener.Addr(), err)
		}()
	}
	var first error
	pending := len(eps)
	select {
	case <-ctx.Done():
	case first = <-served:
		pending--
		if first == nil {
			first = errors.New("a server stopped serving before shutdown")
		}
	}
	addrs := make([]string, len(eps))
	for i, ep := range eps {
		addrs[i] = ep.Listener.Addr().String()
	}
	logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "draining: no new connections, waiting for requests in flight",
		slog.String("addr", strings.Join(addrs, ",")), slog.Int64("timeout_ms", grace.Milliseconds()))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	shut := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			if err := ep.Server.Shutdown(sctx); err != nil {
				ep.Server.Close()
				shut <- fmt.Errorf("shut down %s within %v: %w", ep.Listener.Addr(), grace, err)
				return
			}
			shut <- nil
		}()
	}
	for range eps {
		if err := <-shut; err != nil && first == nil {
			first = err
		}
	}
	for range pending {
		if err := <-served; err != nil && first == nil {
			first = err
		}
	}
	for _, ep := range eps {
		ep.Listener.Close() // a server that failed may not have
	}
	return first
}
