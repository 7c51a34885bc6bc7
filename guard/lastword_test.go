package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// TestLocalStartsFromSharedWord: when a shard goes down, a key's local
// bucket holds the gateway's part of what the shared store last said the
// key had left, refilled since, not a full bucket. The clock stands still
// while the local answers are counted.
func TestLocalStartsFromSharedWord(t *testing.T) {
	tb := limit.Limit{Name: "s", Count: 100, Period: time.Second, Burst: 100}
	gcra := tb
	gcra.Algorithm = limit.GCRA
	window := limit.Limit{Name: "m", Count: 100, Period: time.Minute, Algorithm: limit.FixedWindow}
	changed := tb
	changed.Burst = 200
	for _, tc := range []struct {
		name     string
		said     limit.Limit // the limit the shared store decided
		spent    int64       // tokens spent through the shared store (0: never asked)
		later    limit.Limit // the limit asked during the outage
		gateways int
		after    time.Duration // from the shared store's last word to the outage
		want     int
	}{
		{"remaining 10 of 100, alone at slack 2 over 2 gateways", tb, 90, tb, 2, 0, 10},
		{"remaining 40 at half the share", tb, 60, tb, 4, 0, 20},
		{"refilled since the word, at the local rate", tb, 60, tb, 4, 500 * time.Millisecond, 45},
		{"refilled full long after the word", tb, 100, tb, 4, time.Minute, 50},
		{"spent to the last token", tb, 100, tb, 2, 0, 0},
		{"gcra", gcra, 90, gcra, 2, 0, 10},
		{"fixed window", window, 70, window, 2, 0, 30},
		{"the limit changed since: starts full", tb, 90, changed, 2, 0, 200},
		{"never decided in the shared store: starts full", tb, 0, tb, 2, 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := limittest.NewClock(start)
			remote := newFlaky(clk.Now)
			s, err := guard.New(remote, guard.Config{TripAfter: 1, Fleet: limit.Fleet{Gateways: tc.gateways}, Now: clk.Now, Shard: shardOf})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if tc.spent > 0 {
				d, err := s.Take(context.Background(), &limit.Request{Key: "a/alice", Cost: tc.spent, Limits: []limit.Limit{tc.said}})
				if err != nil || !d.Allowed || d.Source != limit.FromRedis {
					t.Fatalf("shared take of %d: %+v, %v; want allowed by the remote", tc.spent, d, err)
				}
			}
			clk.Advance(tc.after)
			remote.set("a", "error")
			req := &limit.Request{Key: "a/alice", Limits: []limit.Limit{tc.later}}
			got := 0
			for range 1000 {
				d, err := s.Take(context.Background(), req)
				if err != nil || d.Source != limit.FromLocalFallback {
					t.Fatalf("during the outage: %+v, %v; want a local answer", d, err)
				}
				if !d.Allowed {
					break
				}
				got++
			}
			if got != tc.want {
				t.Errorf("got %d admitted locally, want %d", got, tc.want)
			}
		})
	}
}

// TestLongCallWordNotDatedAtItsStart: on the real clock, the shared
// store's last word from a call that waited long for its answer (here 800
// ms, within Timeout+MaxQueue on a node that answers) is dated when the
// answer came, not when the call was listed: dated at its start, the local
// bucket of the outage that follows counts 800 ms of refill the shared
// store never granted, and hands out most of a fresh burst of a key that
// had just spent its own.
func TestLongCallWordNotDatedAtItsStart(t *testing.T) {
	limits := perSecond(10, 10)
	remote := &watched{store: memstore.New(memstore.Config{}), delay: 800 * time.Millisecond}
	s, err := guard.New(remote, guard.Config{TripAfter: 1, Slack: 1, Fleet: limit.Fleet{Gateways: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.Take(context.Background(), &limit.Request{Key: "k", Cost: 10, Limits: limits})
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("shared take of the whole burst: %+v, %v; want allowed, 0 remaining", d, err)
	}
	remote.delay, remote.err = 0, errors.New("connection refused")
	got := 0
	for range 100 {
		d, err := s.Take(context.Background(), &limit.Request{Key: "k", Limits: limits})
		if err != nil || d.Source != limit.FromLocalFallback {
			t.Fatalf("during the outage: %+v, %v; want a local answer", d, err)
		}
		if !d.Allowed {
			break
		}
		got++
	}
	// The burst was spent an instant ago: at 10 a second, at most one
	// token has come back since.
	if got > 1 {
		t.Errorf("%d admitted locally right after the shared store said 0 remained, want at most 1", got)
	}
}
