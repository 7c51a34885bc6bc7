package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// topology is which node serves each slot, as one CLUSTER SLOTS reply said.
type topology struct {
	addrs []string
	owner [slots]uint16 // index into addrs plus one; 0 for a slot nobody serves
	one   bool          // every slot is addrs[0]'s: a standalone server or a Sentinel's primary
}

// NodeAddr returns the address of the primary that served slot when the
// store last read the cluster's slot map (when it connected, then at each
// RefreshNodes), or "" if no node served it then. On a standalone server
// every slot is that server's; under Sentinel, the primary's the Sentinels
// named at the last read. Before the store has connected, every slot
// is on one unknown node, named by the seed addresses joined with commas. It does no I/O, so a per-node circuit
// breaker may call it on every request: NodeAddr(Slot(key)).
//
// The client follows the cluster on its own (MOVED replies, lost
// connections), but rueidis does not expose its slot map, so the store
// keeps this copy, read again every Config.RefreshInterval: after a
// failover it names the old primary until then. Callers may call
// RefreshNodes sooner, for example when a node's breaker opens.
func (s *Store) NodeAddr(slot uint16) string {
	t := s.topo.Load()
	if int(slot) >= len(t.owner) || t.owner[slot] == 0 {
		return ""
	}
	return t.addrs[t.owner[slot]-1]
}

// NodeAddrs returns the addresses NodeAddr can name as of the store's last
// read of the slot map: each primary serving slots, or the standalone
// server. It does no I/O.
func (s *Store) NodeAddrs() []string {
	return slices.Clone(s.topo.Load().addrs)
}

// RefreshNodes reads the cluster's slot map again (CLUSTER SLOTS, from any
// node), or under Sentinel which primary the client follows, for NodeAddr.
// On a standalone server there is nothing to read, and neither before the
// store has connected: it reads the map when it connects.
func (s *Store) RefreshNodes(ctx context.Context) error {
	l := s.link.Load()
	if l == nil {
		return nil
	}
	return s.readNodes(ctx, l)
}

// readNodes is RefreshNodes through l.
func (s *Store) readNodes(ctx context.Context, l *link) error {
	if l.client.Mode() != rueidis.ClientModeCluster {
		// One node: the standalone server, or the primary the Sentinels
		// name now, which a failover changes.
		node := s.seeds[0]
		for addr := range l.client.Nodes() {
			node = addr
		}
		if old := s.topo.Load(); old != nil && len(old.addrs) == 1 && old.addrs[0] != node && l.client.Mode() == rueidis.ClientModeSentinel {
			s.log.Info("redis primary changed", "from", old.addrs[0], "to", node)
		}
		s.topo.Store(unknownTopology(node))
		return nil
	}
	t := &topology{}
	resp := l.client.Do(ctx, l.client.B().ClusterSlots().Build())
	if err := resp.Error(); err != nil {
		return fmt.Errorf("redisstore: CLUSTER SLOTS: %w: %w", classify(err), err)
	}
	rows, err := resp.ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: CLUSTER SLOTS: %w: %w", ErrReply, err)
	}
	// A node that announces no IP (one that never met another, without
	// cluster-announce-ip: a one-node cluster) means "the host you asked":
	// the seed's.
	seedHost, _, _ := net.SplitHostPort(s.seeds[0])
	index := map[string]uint16{}
	for _, row := range rows {
		first, last, addr, err := slotRow(row, seedHost)
		if err != nil {
			return fmt.Errorf("redisstore: CLUSTER SLOTS: %w: %w", ErrReply, err)
		}
		i, ok := index[addr]
		if !ok {
			t.addrs = append(t.addrs, addr)
			i = uint16(len(t.addrs))
			index[addr] = i
		}
		for sl := first; sl <= last; sl++ {
			t.owner[sl] = i
		}
	}
	if old := s.topo.Load(); old == nil || !slices.Equal(old.addrs, t.addrs) || old.owner != t.owner {
		s.log.Info("redis cluster slot map read", "primaries", t.addrs)
	}
	s.topo.Store(t)
	s.keepPipes(t.addrs)
	return nil
}

// slotRow reads one CLUSTER SLOTS row: [first, last, [ip, port, ...],
// replicas...]. An empty ip reads as host.
func slotRow(row rueidis.RedisMessage, host string) (first, last int64, addr string, err error) {
	f, err := row.ToArray()
	if err != nil || len(f) < 3 {
		return 0, 0, "", fmt.Errorf("row is not [first last primary ...]: %v", err)
	}
	if first, err = f[0].ToInt64(); err != nil {
		return 0, 0, "", fmt.Errorf("first slot: %w", err)
	}
	if last, err = f[1].ToInt64(); err != nil {
		return 0, 0, "", fmt.Errorf("last slot: %w", err)
	}
	if first < 0 || last < first || last >= slots {
		return 0, 0, "", fmt.Errorf("slot range %d-%d is not within 0-%d", first, last, slots-1)
	}
	node, err := f[2].ToArray()
	if err != nil || len(node) < 2 {
		return 0, 0, "", fmt.Errorf("primary is not [ip port ...]: %v", err)
	}
	ip, err := node[0].ToString()
	if err != nil {
		return 0, 0, "", fmt.Errorf("primary ip: %w", err)
	}
	port, err := node[1].ToInt64()
	if err != nil {
		return 0, 0, "", fmt.Errorf("primary port: %w", err)
	}
	return first, last, net.JoinHostPort(cmp.Or(ip, host), strconv.FormatInt(port, 10)), nil
}

// refreshEvery reads the slot map every interval until ctx ends. A failed
// read keeps the last map: NodeAddr then names nodes as they were, which is
// the best guess while the cluster is unreachable.
func (s *Store) refreshEvery(ctx context.Context, every time.Duration, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := s.RefreshNodes(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("redis cluster slot map not refreshed", "err", err)
		}
	}
}
