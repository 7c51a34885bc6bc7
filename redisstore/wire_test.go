package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

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

// TestOneConnectionPerNode: however many takes run at once, the store
// pipelines them on one connection to each node, as CLIENT LIST on the
// servers shows, so that takes arriving together share a write.
func TestOneConnectionPerNode(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, tc := range []struct {
		name  string
		addrs []string
		nodes []*redistest.Server
	}{
		{"standalone", []string{srv.Addr()}, []*redistest.Server{srv}},
		{"cluster", cluster.Addrs(), cluster.Nodes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sluiceClients(t, tc.nodes)
			s := newStore(t, redisstore.Config{Addrs: tc.addrs, Prefix: "onepipe:"})
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 20 {
						req := &limit.Request{Key: fmt.Sprintf("k:%d:%d", g, i), Limits: []limit.Limit{perSecond("s", 1000, 1000)}}
						if _, err := s.Take(context.Background(), req); err != nil {
							t.Errorf("take: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			after := sluiceClients(t, tc.nodes)
			for addr, n := range after {
				if got := n - before[addr]; got != 1 {
					t.Errorf("node %s: %d connections of the store after 64 goroutines' takes, want 1", addr, got)
				}
			}
		})
	}
}

// sluiceClients counts, per node, the connections named "sluice" (the
// store's rueidis client) in CLIENT LIST.
func sluiceClients(t *testing.T, nodes []*redistest.Server) map[string]int {
	t.Helper()
	return namedClients(t, nodes, "sluice")
}

// namedClients counts, per node, the connections called name in CLIENT
// LIST.
func namedClients(t *testing.T, nodes []*redistest.Server, name string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, node := range nodes {
		v, err := node.Do(context.Background(), "CLIENT", "LIST")
		if err != nil {
			t.Fatalf("CLIENT LIST on %s: %v", node.Addr(), err)
		}
		list, ok := v.(string)
		if !ok {
			t.Fatalf("CLIENT LIST on %s: got %T, want a string", node.Addr(), v)
		}
		n[node.Addr()] = strings.Count(list, " name="+name+" ")
	}
	return n
}

// TestWritesCounted: a take waits for its reply, so takes one after another
// cannot share a write, and Writes counts at least one each; a store on a
// caller's client watches no connection and counts none.
func TestWritesCounted(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}, Prefix: "writes:"})
	before := s.Writes()
	const takes = 20
	for i := range takes {
		take(t, s, &limit.Request{Key: fmt.Sprint("k:", i), Limits: []limit.Limit{perSecond("s", 10, 10)}})
	}
	if got := s.Writes() - before; got < takes {
		t.Errorf("Writes grew by %d over %d takes one after another, want at least %d", got, takes, takes)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{standalone.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	own, err := redisstore.NewWithClient(t.Context(), client, redisstore.Config{Prefix: "writes:"})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	take(t, own, &limit.Request{Key: "k:own", Limits: []limit.Limit{perSecond("s", 10, 10)}})
	if got := own.Writes(); got != 0 {
		t.Errorf("Writes of a store on a caller's client = %d, want 0: it watches no connection", got)
	}
}
