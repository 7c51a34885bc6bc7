package redisstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestPipeWriterHonoursContext: on a frozen server whose socket buffers
// are full, the caller that writes the pipe's buffer must still return
// when its context ends, by its deadline or cancelled without one, as
// every other caller does.
func TestPipeWriterHonoursContext(t *testing.T) {
	srv := redistest.Standalone(t)
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}, ConnTimeout: 3 * time.Second})
	waitPipe(t, s, "warm")
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	defer srv.Cont()
	req := &limit.Request{Key: strings.Repeat("k", 1<<20), Limits: []limit.Limit{perSecond("s", 1000, 1000)}}
	for i := range 40 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if i%2 == 1 {
			// A context cancelled with no deadline, as the guard ends the
			// calls of a node it judges silent.
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
		}
		start := time.Now()
		_, err := s.Take(ctx, req)
		cancel()
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Fatalf("take %d with a 50 ms context returned after %v (%v)", i, took, err)
		}
	}
}

// TestPipeRetiredAfterFailover: a primary that fails over leaves the
// slot map; the store stops dialling it instead of keeping a goroutine
// that redials it every 2 s until Close, one per address ever seen.
func TestPipeRetiredAfterFailover(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	ctx := t.Context()
	s := newStore(t, redisstore.Config{Addrs: c.Addrs(), RefreshInterval: 50 * time.Millisecond})
	req := &limit.Request{Key: "retire", Limits: []limit.Limit{perSecond("s", 1, 1000)}}
	node := waitPipe(t, s, req.Key)
	victim, err := c.NodeForKey(ctx, req.Key)
	if err != nil || victim.Addr() != node {
		t.Fatalf("NodeForKey: %v, %v; want %s", victim, err, node)
	}
	if err := c.Kill(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFailover(ctx, victim); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for slices.Contains(s.NodeAddrs(), node) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still in the slot map 10 s after its failover", node)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for slices.Contains(redisstore.PipeAddrs(s), node) {
		if time.Now().After(deadline) {
			t.Fatalf("the store still dials %s, gone from the slot map (%v)", node, s.NodeAddrs())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
