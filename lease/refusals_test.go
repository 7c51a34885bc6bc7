package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
)

// calls counts the calls made to a shared store.
type calls struct {
	limit.Granter
	n atomic.Int64
}

func (c *calls) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	c.n.Add(1)
	return c.Granter.Take(ctx, req)
}

func (c *calls) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	c.n.Add(1)
	return c.Granter.TakeUpTo(ctx, req, want)
}

// TestRefusalsCountThroughCache sends, through a lease store, a client
// that ignores 429 and retries every 10 ms for two seconds, on a limit of
// 10 a second whose refusals count, over memstore and over a real Redis:
// never once allowed after its first refusal (with free refusals it would
// pass about 20 times),
// at a small fraction of a call per refusal (the refusals answered from
// memory are charged with the key's next call, not one call each); once
// it stops for long enough to pay a burst of debt, it passes. The same
// client on a limit whose refusals are free passes at the limit's rate.
func TestRefusalsCountThroughCache(t *testing.T) {
	srv, stop, err := redistest.NewStandalone()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	for _, shared := range []string{"memstore", "redis"} {
		for _, count := range []bool{true, false} {
			name := shared + "/free"
			if count {
				name = shared + "/count"
			}
			t.Run(name, func(t *testing.T) {
				clk := limittest.NewClock(start)
				var inner limit.Granter = memstore.New(memstore.Config{Now: clk.Now})
				if shared == "redis" {
					rs, err := redisstore.New(t.Context(), redisstore.Config{Addrs: []string{srv.Addr()}, Now: clk.Now})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(rs.Close)
					inner = rs
				}
				c := &calls{Granter: inner}
				s, err := New(c, Config{Now: clk.Now})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				l := bucket(10, 10)
				l.CountRefusals = count
				req := &limit.Request{Key: "k:ignores-429:" + name, Limits: []limit.Limit{l}}
				allowed, fromMemory := 0, 0
				for range 200 {
					d, err := s.Take(t.Context(), req)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
					if d.Source == limit.FromRefusalCache {
						fromMemory++
					}
					s.wg.Wait()
					clk.Advance(10 * time.Millisecond)
				}
				n := c.n.Load()
				if !count {
					// A burst of 10, then a token every 100 ms.
					if allowed < 25 || allowed > 31 {
						t.Errorf("free refusals, 200 tries in 2s: %d allowed, want 10 + about 20", allowed)
					}
					return
				}
				if allowed != 11 {
					t.Errorf("refusals that count, 200 tries in 2s: %d allowed, want the burst of 10 and the token refilled before the first refusal, and no more", allowed)
				}
				t.Logf("%d refusals from memory, %d shared-store calls", fromMemory, n)
				if fromMemory < 150 || n > 30 {
					t.Errorf("%d refusals from memory and %d shared-store calls for 200 requests, want most from memory and few calls", fromMemory, n)
				}
				clk.Advance(2 * time.Second) // a burst of debt and a token
				if d, err := s.Take(t.Context(), req); err != nil || !d.Allowed {
					t.Errorf("after stopping for 2s: %+v, %v; want allowed", d, err)
				}
			})
		}
	}
}

// refusedSeen is a shared store that remembers the most Request.Refused it
// was sent.
type refusedSeen struct {
	limit.Granter
	most atomic.Int64
}

func (r *refusedSeen) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	r.most.Store(max(r.most.Load(), req.Refused))
	return r.Granter.TakeUpTo(ctx, req, want)
}

// TestCallersRefusedCharged sends a lease store (as a relay's) requests
// that carry refusals their caller answered from memory
// (limit.Request.Refused) while it serves them from leased tokens: the
// refusals are kept in the key's book and sent with its next call to the
// shared store, not dropped with the answer from memory.
func TestCallersRefusedCharged(t *testing.T) {
	clk := limittest.NewClock(start)
	inner := &refusedSeen{Granter: memstore.New(memstore.Config{Now: clk.Now})}
	s, err := New(inner, Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	l := bucket(1000, 1000)
	l.CountRefusals = true
	req := &limit.Request{Key: "k:relayed", Limits: []limit.Limit{l}}
	var leased int
	for i := range 50 {
		req.Refused = 0
		if i > 0 && i%10 == 0 {
			req.Refused = 3
		}
		d, err := s.Take(t.Context(), req)
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v; want allowed", i, d, err)
		}
		if d.Source == limit.FromLease {
			leased++
		}
		s.wg.Wait()
		clk.Advance(time.Millisecond)
	}
	if leased == 0 {
		t.Fatal("no request served from a lease: the test shows nothing")
	}
	if got := inner.most.Load(); got < 3 {
		t.Errorf("most refused cost sent to the shared store: %d, want at least 3 (the callers' refusals)", got)
	}
}
