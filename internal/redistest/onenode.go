package redistest

import (
	"context"
	"fmt"
	"os"
	"time"
)

// OneNodeCluster starts a Redis Cluster of a single node that serves every
// slot, and stops it when the test ends. Such a node has never met another,
// so it announces no IP of its own in CLUSTER SLOTS: clients must read that
// as the address they asked.
func OneNodeCluster(t TB) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "redistest-onenode-")
	if err != nil {
		t.Fatalf("redistest: make server directory: %v", err)
	}
	s, err := startOnFreePort(dir, true, nil)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { s.Kill(); os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := s.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatalf("redistest: one-node cluster: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for {
		info, err := s.Do(ctx, "CLUSTER", "INFO")
		if err == nil && infoField(info, "cluster_state") == "ok" {
			return s
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: one-node cluster %s not ready: %v", s.Addr(), fmt.Errorf("%w (last: %v)", ctx.Err(), err))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
