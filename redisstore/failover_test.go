package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestFollowsFailover kills the primary that holds a key and checks what a
// gateway would see: Takes fail as timeouts or unavailability, never as
// bad replies, until the replica takes over; then Takes succeed again, and
// NodeAddr names the new primary. It has a cluster of its own, since it
// breaks it.
func TestFollowsFailover(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	ctx := t.Context()
	s := newStore(t, redisstore.Config{Addrs: c.Addrs(), RefreshInterval: 50 * time.Millisecond})
	req := &limit.Request{Key: "failover", Limits: []limit.Limit{perSecond("s", 1, 1000)}}
	take(t, s, req)
	slot := redisstore.Slot(req.Key)
	victim, err := c.NodeForSlot(ctx, int(slot))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.NodeAddr(slot); got != victim.Addr() {
		t.Fatalf("NodeAddr before the kill: got %s, want %s", got, victim.Addr())
	}
	if err := c.Kill(ctx, victim); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	failures := 0
	for {
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		d, err := s.Take(tctx, req)
		cancel()
		if err == nil {
			t.Logf("Takes answered again %v after the kill (%d failed meanwhile); remaining %d", time.Since(began).Round(10*time.Millisecond), failures, d.Remaining)
			break
		}
		failures++
		if !errors.Is(err, redisstore.ErrTimeout) && !errors.Is(err, redisstore.ErrUnavailable) {
			t.Errorf("Take while the primary is down: got %v, want ErrTimeout or ErrUnavailable", err)
		}
		if time.Since(began) > 30*time.Second {
			t.Fatalf("Takes still failing 30s after the kill: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	heir, err := c.WaitFailover(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.NodeAddr(slot) != heir.Addr() {
		if time.Now().After(deadline) {
			t.Fatalf("NodeAddr 5s after the failover: got %s, want the heir %s", s.NodeAddr(slot), heir.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
