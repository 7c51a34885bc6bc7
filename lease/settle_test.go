package lease

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// TestSettleLocal settles against a busy key's leased tokens: a rest the
// lease holds is spent from it, unused tokens go back into the live lease
// up to one batch, and what it cannot settle is returned for the shared
// store; none of it calls the shared store.
func TestSettleLocal(t *testing.T) {
	clock := limittest.NewClock(start)
	shared := &counted{Store: memstore.New(memstore.Config{Now: clock.Now})}
	s, err := New(shared, Config{Now: clock.Now, Lookahead: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// 10 a second, burst 100, 10 s of lookahead: a batch of up to 100,
	// as many as the key's demand here earns.
	req := &limit.Request{Key: "k:a", Cost: 1, Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second, Burst: 100}}}
	ctx := context.Background()
	for range 20 {
		if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("take: %+v, %v", d, err)
		}
		s.wg.Wait() // the background batch
	}
	held := func() int64 {
		e := s.shards.At(s.shards.Hash(req.Key)).M[string(appendID(nil, req))]
		if e == nil {
			t.Fatal("no lease entry for a busy key")
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.b.tokens
	}
	h := held()
	if h < 10 {
		t.Fatalf("leased %d tokens, want a batch", h)
	}
	calls := shared.calls.Load()
	tests := []struct {
		delta, wantRest, wantHeld int64
	}{
		{+5, 0, h - 5},            // spent from the lease
		{-3, 0, h - 2},            // back into the lease
		{+h, 2, 0},                // more than it holds: the rest for the shared store
		{-1000, -1000 + 100, 100}, // back up to one batch, the rest for the shared store
		{0, 0, 100},
	}
	for i, tt := range tests {
		if rest := s.SettleLocal(req, tt.delta); rest != tt.wantRest {
			t.Errorf("step %d: settle %+d: got rest %d, want %d", i, tt.delta, rest, tt.wantRest)
		}
		if got := held(); got != tt.wantHeld {
			t.Errorf("step %d: got %d held, want %d", i, got, tt.wantHeld)
		}
	}
	if got := shared.calls.Load() - calls; got != 0 {
		t.Errorf("the shared store was called %d times, want 0", got)
	}
	// A lease that ended takes nothing back; a key without a lease settles
	// nothing here.
	clock.Advance(2 * time.Second)
	if rest := s.SettleLocal(req, -4); rest != -4 {
		t.Errorf("after the lease ended: got rest %d, want -4", rest)
	}
	other := &limit.Request{Key: "k:quiet", Limits: req.Limits}
	if rest := s.SettleLocal(other, 7); rest != 7 {
		t.Errorf("a key without a lease: got rest %d, want 7", rest)
	}
}
