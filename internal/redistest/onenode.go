package redistest

import (
	"context"
	"fmt"
	"time"
)

// OneNodeCluster starts a Redis Cluster of a single node that serves every
// slot, and stops it when the test ends. Such a node has never met another,
// so it announces no IP of its own in CLUSTER SLOTS: clients must read that
// as the address they asked.
func OneNodeCluster(t TB) *Server {
	t.Helper()
	s := startFor(t, func(dir string) (*Server, error) { return startOnFreePort(dir, true, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := s.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatalf("redistest: one-node cluster: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	err := retry(ctx, 20*time.Millisecond, func() error {
		info, err := s.Do(ctx, "CLUSTER", "INFO")
		if err == nil && infoField(info, "cluster_state") != "ok" {
			err = fmt.Errorf("cluster_state %q", infoField(info, "cluster_state"))
		}
		return err
	})
	if err != nil {
		t.Fatalf("redistest: one-node cluster %s not ready: %v", s.Addr(), err)
	}
	return s
}
