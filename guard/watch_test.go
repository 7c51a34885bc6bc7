package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// watched is a remote whose calls take delay before they answer, and
// whose node reads as silent for silence (the Watcher's view): how a slow
// node, a frozen one and a busy gateway look to the guard.
type watched struct {
	store   *memstore.Store
	delay   time.Duration
	silence time.Duration // how long the node has owed replies with nothing arriving
	err     error         // returned instead of an answer
}

func (w *watched) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	t := time.NewTimer(w.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return limit.Decision{}, ctx.Err()
	case <-t.C:
	}
	if w.err != nil {
		return limit.Decision{}, w.err
	}
	return w.store.Take(ctx, req)
}

func (w *watched) Stalled(_ string, d time.Duration) bool { return w.silence >= d }

func TestWatchedNode(t *testing.T) {
	const timeout = 2 * time.Millisecond
	badReply := fmt.Errorf("WRONGTYPE Operation against a key holding the wrong kind of value: %w", limit.ErrBadReply)
	for _, tc := range []struct {
		name    string
		remote  watched
		want    limit.Source
		wantErr error
		open    bool
	}{
		{"busy gateway, node answering: wait for its answer", watched{delay: 20 * time.Millisecond}, limit.FromMemory, nil, false},
		{"slow node, not yet down: wait for its answer", watched{delay: 20 * time.Millisecond, silence: timeout}, limit.FromMemory, nil, false},
		{"node paused for tens of ms: wait for its answer", watched{delay: 40 * time.Millisecond, silence: 40 * time.Millisecond}, limit.FromMemory, nil, false},
		{"node silent past DownAfter: down at once", watched{delay: time.Hour, silence: time.Hour}, limit.FromLocalFallback, nil, true},
		{"queued past MaxQueue while the node answers: shed", watched{delay: time.Hour}, limit.FromShed, guard.ErrShed, false},
		{"an error about the key's data is not the node's", watched{err: badReply}, "", limit.ErrBadReply, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.remote.store = memstore.New(memstore.Config{})
			var opened atomic.Int64
			s, err := guard.New(&tc.remote, guard.Config{
				Timeout: timeout, MaxQueue: 60 * time.Millisecond, TripAfter: 1,
				OnTransition: func(_ string, _, to guard.State, _ error) {
					if to == guard.Open {
						opened.Add(1)
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			req := &limit.Request{Key: "k:a", Limits: perSecond(10, 10)}
			d, err := s.Take(context.Background(), req)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if d.Source != tc.want {
				t.Errorf("source %q, want %q", d.Source, tc.want)
			}
			if got := opened.Load() > 0; got != tc.open {
				t.Errorf("breaker opened %v, want %v (one call, TripAfter 1)", got, tc.open)
			}
			if tc.want == limit.FromShed && d.RetryAfter < time.Second {
				t.Errorf("shed with retry %v, want at least 1s", d.RetryAfter)
			}
		})
	}
}

// TestCallerDeadlineOnAnsweringNode: a caller whose own deadline passes
// while the node answers others was kept waiting by this process, so the
// request is shed and the node's breaker stays closed.
func TestCallerDeadlineOnAnsweringNode(t *testing.T) {
	remote := &watched{store: memstore.New(memstore.Config{}), delay: time.Hour}
	s, err := guard.New(remote, guard.Config{Timeout: 2 * time.Millisecond, TripAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	d, err := s.Take(ctx, &limit.Request{Key: "k:a", Limits: perSecond(10, 10)})
	if !errors.Is(err, guard.ErrShed) || d.Source != limit.FromShed {
		t.Fatalf("got %+v, %v; want a shed request", d, err)
	}
	if st := s.Breaker(""); st != guard.Closed {
		t.Errorf("breaker %v after the caller's deadline on an answering node, want closed", st)
	}
}

// panicky fails its first call, panics on its second (the probe) and
// answers after that.
type panicky struct {
	store *memstore.Store
	calls atomic.Int64
}

func (p *panicky) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	switch p.calls.Add(1) {
	case 1:
		return limit.Decision{}, errors.New("connection refused")
	case 2:
		panic("remote store failed")
	}
	return p.store.Take(ctx, req)
}

// TestProbePanicReleasesTheProbe: a probe whose remote panics (recovered
// above, as net/http does) leaves the breaker able to probe again, rather
// than half-open with its probe out forever.
func TestProbePanicReleasesTheProbe(t *testing.T) {
	clk := limittest.NewClock(start)
	remote := &panicky{store: memstore.New(memstore.Config{Now: clk.Now})}
	s, err := guard.New(remote, guard.Config{TripAfter: 1, Pause: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := &limit.Request{Key: "k:a", Limits: perSecond(10, 10)}
	if d, _ := s.Take(context.Background(), req); d.Source != limit.FromLocalFallback {
		t.Fatalf("first call: source %q, want %q", d.Source, limit.FromLocalFallback)
	}
	clk.Advance(time.Second)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the probe's panic was swallowed")
			}
		}()
		s.Take(context.Background(), req)
	}()
	if d, err := s.Take(context.Background(), req); err != nil || d.Source != limit.FromMemory {
		t.Fatalf("after the probe panicked: %+v, %v; want the next call to probe and get the remote's answer", d, err)
	}
}
