package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestRelayScale runs the relay bench small: both modes admit the busy
// key no more than its limit allows, and every request is answered.
func TestRelayScale(t *testing.T) {
	srv := redistest.Standalone(t)
	res, err := RelayScale(context.Background(), RelayConfig{Addrs: []string{srv.Addr()}, Gateways: 50, Relays: 2,
		QuietKeys: 200, Workers: 8, Duration: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("got %d modes, want direct and relay", len(res))
	}
	for _, r := range res {
		if r.Errors > 0 {
			t.Errorf("%s: %d errors, want none", r.Mode, r.Errors)
		}
		if r.HotAdmitted > r.HotAllowed {
			t.Errorf("%s: admitted %d on the busy key, over the %d its limit allows", r.Mode, r.HotAdmitted, r.HotAllowed)
		}
		if r.Requests == 0 || r.RedisCalls == 0 {
			t.Errorf("%s: %d requests, %d Redis calls: the run did nothing", r.Mode, r.Requests, r.RedisCalls)
		}
		t.Logf("%s: direct %d, hot calls %d, %d requests, %.3f Redis calls a request, busy key %d admitted of %d allowed (asked %.1fx)",
			r.Mode, r.DirectCalls, r.HotCalls, r.Requests, r.CallsPerRequest(), r.HotAdmitted, r.HotAllowed, r.HotMultiple())
	}
}
