// Package process is the plumbing every sluice command shares: servers
// with limits fit for a public address, one shutdown path (stop
// accepting, let the work in flight finish within a timeout, say so in the
// log), SIGHUP as a request to reload, readiness, and the metrics endpoint
// with optional profiling.
//
// A command's life under it: Signals gives the context that SIGINT or
// SIGTERM ends; the command builds its servers (NewServer, or any Server
// such as a wrapped gRPC server) and hands them to Run, which serves until
// that context ends and then drains them all at once; Inflight lets the
// command wait for handlers that outlive the drain before it closes what
// they use.
package process

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// hangups hands each SIGHUP to every subscriber. A command that reloads
// nothing still receives the signal, so SIGHUP never ends the process (by
// default it would, with no drain and no log).
type hangups struct {
	mu   sync.Mutex
	subs []chan struct{} // guarded by mu
}

type hangupsKey struct{}

// Signals returns a context that ends at SIGINT or SIGTERM and that makes
// each SIGHUP a request to reload, received through Hangups and OnHangup.
// stop releases the signals; call it before the process exits.
func Signals(parent context.Context) (ctx context.Context, stop func()) {
	ctx, stopTerm := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	h := &hangups{}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	stopLoop := each(sig, h.broadcast)
	return context.WithValue(ctx, hangupsKey{}, h), func() {
		signal.Stop(sig)
		stopLoop()
		stopTerm()
	}
}

func (h *hangups) broadcast() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.subs {
		select {
		case c <- struct{}{}:
		default: // a reload is already pending
		}
	}
}

// Hangups returns a channel that receives after each SIGHUP the process
// gets while ctx (from Signals) lives; two SIGHUPs before the receiver
// looks count as one. A context not from Signals, as in tests that run a
// command directly, gives a channel that never receives.
func Hangups(ctx context.Context) <-chan struct{} {
	c := make(chan struct{}, 1)
	if h, ok := ctx.Value(hangupsKey{}).(*hangups); ok {
		h.mu.Lock()
		h.subs = append(h.subs, c)
		h.mu.Unlock()
	}
	return c
}

// OnHangup calls f, in a goroutine of its own, after each SIGHUP (see
// Hangups) until stop is called; stop returns once f no longer runs.
func OnHangup(ctx context.Context, f func()) (stop func()) {
	return each(Hangups(ctx), f)
}

// Go runs f in a goroutine of its own until stop is called: stop cancels
// f's context and returns once f has. The context is a fresh one, not the
// command's: what Go runs is stopped by its owner, in order, not by the
// signal that begins the drain.
func Go(f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// each calls f for every value c receives, in a goroutine of its own,
// until stop is called; stop returns once f no longer runs.
func each[T any](c <-chan T, f func()) (stop func()) {
	return Go(func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-c:
				f()
			}
		}
	})
}
