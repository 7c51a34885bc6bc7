package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestStalled freezes a real server (SIGSTOP) with a call in flight: the
// node reads as stalled once it has owed the reply for the asked time, and
// not before the freeze or after it answers again.
func TestStalled(t *testing.T) {
	srv := redistest.Standalone(t)
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}})
	req := &limit.Request{Key: "k:stall", Limits: []limit.Limit{perSecond("s", 1000, 1000)}}
	node := s.Node(req.Key)
	if node != srv.Addr() {
		t.Fatalf("Node(%q) = %q, want the server %q", req.Key, node, srv.Addr())
	}
	take(t, s, req)
	if s.Stalled(node, time.Millisecond) {
		t.Fatal("a node that has answered every call reads as stalled")
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.Take(ctx, req); err != nil {
			t.Errorf("take across the freeze: %v", err)
		}
	})
	deadline := time.Now().Add(3 * time.Second)
	for !s.Stalled(node, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			srv.Cont()
			wg.Wait()
			t.Fatal("a frozen node owing a reply does not read as stalled after 3 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s.Stalled(node, time.Hour) {
		t.Error("a node frozen for less than an hour reads as stalled for an hour")
	}
	if s.Stalled("127.0.0.1:1", time.Millisecond) {
		t.Error("a node the store never talked to reads as stalled")
	}
	if err := srv.Cont(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Whatever the client wrote during the freeze (a keepalive PING, say)
	// is answered too once the node runs: then nothing is owed for long.
	for deadline := time.Now().Add(3 * time.Second); s.Stalled(node, 20*time.Millisecond); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node still reads as stalled 3 s after it answered")
		}
	}
}

// TestOneNodeClusterNamesItsNode: a cluster of one node announces no IP in
// CLUSTER SLOTS ("the host you asked"); its keys still name the node by a
// full address, so its breaker and its wire watch are the node's.
func TestOneNodeClusterNamesItsNode(t *testing.T) {
	node := redistest.OneNodeCluster(t)
	s := newStore(t, redisstore.Config{Addrs: []string{node.Addr()}})
	if !s.Cluster() {
		t.Fatal("a one-node cluster reads as a standalone server")
	}
	if got, want := s.Node("k:any"), node.Addr(); got != want {
		t.Errorf("Node = %q, want the node's address %q", got, want)
	}
}
