package lease

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// TestSubLeaseNeverOutlivesLease stacks a gateway's Store over a relay's
// (a Leaser) on one fake clock and checks, step by step, that every token
// the gateway holds expires no later than the relay's lease on the key.
func TestSubLeaseNeverOutlivesLease(t *testing.T) {
	clk := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	shared := memstore.New(memstore.Config{Now: clk.Now})
	relay, err := New(shared, Config{Fleet: limit.Fleet{Gateways: 1}, TTL: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	// The gateway keeps tokens longer than the relay does: only the
	// relay's grants can bound them.
	gw, err := New(relay, Config{Fleet: limit.Fleet{Gateways: 1}, TTL: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	req := &limit.Request{Key: "k:busy", Limits: []limit.Limit{{Name: "s", Count: 10_000, Period: time.Second}}}
	for step := range 300 {
		if _, err := gw.Take(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		// Refills run in the background: wait for them before looking.
		gw.wg.Wait()
		relay.wg.Wait()
		gwUntil, gwTokens := held(gw)
		relayUntil, _ := held(relay)
		if gwTokens > 0 && gwUntil > relayUntil {
			t.Fatalf("step %d: gateway holds %d tokens until %d, after the relay's lease ends (%d)", step, gwTokens, gwUntil, relayUntil)
		}
		clk.Advance(7 * time.Millisecond)
	}
	if _, tokens := held(gw); tokens == 0 {
		t.Error("the gateway holds no lease at the end: the test checked nothing")
	}
}

// held returns the latest expiry among s's entries holding tokens, and
// the tokens they hold.
func held(s *Store) (until, tokens int64) {
	for i := range s.shards.Stripes() {
		st := &s.shards.Stripes()[i]
		st.Lock()
		for _, e := range st.M {
			e.mu.Lock()
			if e.b.tokens > 0 {
				until = max(until, e.b.expires)
				tokens += e.b.tokens
			}
			e.mu.Unlock()
		}
		st.Unlock()
	}
	return until, tokens
}

// TestLeaseTTL checks that a sub-lease's TTL, counted from the call, ends
// no later than the relay's own lease on the key.
func TestLeaseTTL(t *testing.T) {
	clk := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	relay, err := New(memstore.New(memstore.Config{Now: clk.Now}), Config{Fleet: limit.Fleet{Gateways: 1}, TTL: time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	req := &limit.Request{Key: "k:busy", Limits: []limit.Limit{{Name: "s", Count: 1000, Period: time.Second}}}
	ctx := context.Background()
	granted := int64(0)
	for step := range 200 {
		start := clk.Now().UnixMilli()
		g, err := relay.Lease(ctx, req, 5)
		if err != nil {
			t.Fatal(err)
		}
		relay.wg.Wait()
		granted += g.Granted
		if g.Granted > 5 {
			t.Fatalf("step %d: got %d tokens, asked for at most 5", step, g.Granted)
		}
		if until, tokens := held(relay); g.Granted > 0 && tokens > 0 && start+g.TTL.Milliseconds() > until {
			t.Fatalf("step %d: sub-lease ends at %d, after the relay's lease (%d)", step, start+g.TTL.Milliseconds(), until)
		}
		clk.Advance(3 * time.Millisecond)
	}
	// 600 ms at 1000 a second from a full bucket: at most 1000 + 600.
	if granted > 1600 || granted < 500 {
		t.Errorf("granted %d tokens in 600ms at 1000/s from a full bucket of 1000, want between 500 and 1600", granted)
	}
}
