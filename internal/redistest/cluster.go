package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Slots is how many hash slots a Redis Cluster has.
const Slots = 16384

// readyTimeout bounds how long a new cluster may take to agree on its
// slots. It forms in about 2 s here; the margin is for loaded CI machines.
const readyTimeout = 60 * time.Second

// Cluster is a Redis Cluster of redis-server processes on loopback ports.
// Its methods are safe for concurrent use. The nodes belong to the Cluster:
// kill, stop and resume them through it or through their own methods.
type Cluster struct {
	nodes []*Server
	dir   string

	mu    sync.Mutex
	lost  map[*Server][]int // guarded by mu; slots a node served when Kill or Stop took it down
	close sync.Once
}

// StartCluster starts a cluster of primaries primaries, each with
// replicasPerPrimary replicas, waits until it serves every slot, and stops
// it when the test ends. It fails the test if the cluster does not form.
// A cluster takes about two seconds to start: share one per package with
// NewCluster in TestMain where tests allow.
func StartCluster(t TB, primaries, replicasPerPrimary int) *Cluster {
	t.Helper()
	c, stop, err := NewCluster(primaries, replicasPerPrimary)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(stop)
	return c
}

// NewCluster is StartCluster without a testing.TB, for TestMain. The caller
// must call stop, which kills every node and removes their directories.
func NewCluster(primaries, replicasPerPrimary int) (c *Cluster, stop func(), err error) {
	return newCluster(primaries, replicasPerPrimary, func(dir string) (*Server, error) {
		return startOnFreePort(dir, true, nil)
	})
}

// newCluster is NewCluster with start starting each node in its directory.
func newCluster(primaries, replicasPerPrimary int, start func(dir string) (*Server, error)) (c *Cluster, stop func(), err error) {
	// Redis Cluster needs three primaries to elect a replica: a majority of
	// primaries must vote.
	if primaries < 3 {
		return nil, nil, fmt.Errorf("cluster of %d primaries: Redis Cluster needs at least 3", primaries)
	}
	if replicasPerPrimary < 0 {
		return nil, nil, fmt.Errorf("cluster with %d replicas per primary: must not be negative", replicasPerPrimary)
	}
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, nil, fmt.Errorf("make cluster directory: %w", err)
	}
	c = &Cluster{dir: dir, lost: map[*Server][]int{}}
	stop = func() {
		c.close.Do(func() {
			for _, n := range c.nodes {
				n.Kill()
			}
			os.RemoveAll(dir)
		})
	}
	if err := c.create(primaries, replicasPerPrimary, start); err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}

func (c *Cluster) create(primaries, replicas int, start func(dir string) (*Server, error)) error {
	n := primaries * (1 + replicas)
	for i := range n {
		s, err := start(filepath.Join(c.dir, "node"+strconv.Itoa(i)))
		if err != nil {
			return fmt.Errorf("cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	// redis-cli lists the primaries first and makes the rest their
	// replicas, so nodes[:primaries] start as the primaries.
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w; output:\n%s", err, out)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return fmt.Errorf("cluster of %d nodes did not become ready: %w", n, err)
	}
	return nil
}

// Nodes returns every node, in the order they were started. Roles change
// with failovers; ask Primaries or NodeForSlot for the current ones.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Addrs returns the address of every node: seeds for a cluster client.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// node returns the node at addr, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// slotRange is one line of CLUSTER SLOTS: slots first..last served by primary.
type slotRange struct {
	first, last int
	primary     string
	replicas    []string
}

// slotMap asks one running node for the cluster's slot map.
func (c *Cluster) slotMap(ctx context.Context) ([]slotRange, error) {
	var last error = errors.New("no node is running")
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		m, err := nodeSlots(ctx, n)
		if err != nil {
			last = err
			continue
		}
		return m, nil
	}
	return nil, last
}

// nodeSlots asks node n for the slot map as it sees it.
func nodeSlots(ctx context.Context, n *Server) ([]slotRange, error) {
	v, err := n.Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	return parseSlots(v)
}

// parseSlots reads a CLUSTER SLOTS reply:
// [[first, last, [ip, port, id, ...], [replica...]...], ...].
func parseSlots(v any) ([]slotRange, error) {
	rows, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("CLUSTER SLOTS replied %T, want an array", v)
	}
	out := make([]slotRange, 0, len(rows))
	for _, r := range rows {
		row, ok := r.([]any)
		if !ok || len(row) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS row %v: want [first last primary replicas...]", r)
		}
		first, ok1 := row[0].(int64)
		last, ok2 := row[1].(int64)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("CLUSTER SLOTS row %v: slot bounds are not integers", r)
		}
		sr := slotRange{first: int(first), last: int(last)}
		for i, nv := range row[2:] {
			node, ok := nv.([]any)
			if !ok || len(node) < 2 {
				return nil, fmt.Errorf("CLUSTER SLOTS row %v: node %v is not [ip port ...]", r, nv)
			}
			ip, ok1 := node[0].(string)
			port, ok2 := node[1].(int64)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("CLUSTER SLOTS row %v: node %v is not [ip port ...]", r, nv)
			}
			addr := ip + ":" + strconv.FormatInt(port, 10)
			if i == 0 {
				sr.primary = addr
			} else {
				sr.replicas = append(sr.replicas, addr)
			}
		}
		out = append(out, sr)
	}
	return out, nil
}

// Primaries returns the nodes that serve slots now, by the slot map of a
// running node, in the order they were started.
func (c *Cluster) Primaries(ctx context.Context) ([]*Server, error) {
	m, err := c.slotMap(ctx)
	if err != nil {
		return nil, fmt.Errorf("redistest: primaries: %w", err)
	}
	serving := map[string]bool{}
	for _, r := range m {
		serving[r.primary] = true
	}
	var out []*Server
	for _, n := range c.nodes {
		if serving[n.Addr()] {
			out = append(out, n)
		}
	}
	return out, nil
}

// NodeForSlot returns the primary that serves slot now, by the slot map of a
// running node.
func (c *Cluster) NodeForSlot(ctx context.Context, slot int) (*Server, error) {
	m, err := c.slotMap(ctx)
	if err != nil {
		return nil, fmt.Errorf("redistest: node for slot %d: %w", slot, err)
	}
	for _, r := range m {
		if r.first <= slot && slot <= r.last {
			if n := c.node(r.primary); n != nil {
				return n, nil
			}
			return nil, fmt.Errorf("redistest: slot %d is served by %s, not a node of this cluster", slot, r.primary)
		}
	}
	return nil, fmt.Errorf("redistest: slot %d is not served by any node", slot)
}

// KeySlot asks a running node which slot key hashes to (CLUSTER KEYSLOT), so
// that tests check slots against Redis itself rather than a copy of its hash.
func (c *Cluster) KeySlot(ctx context.Context, key string) (int, error) {
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		v, err := n.Do(ctx, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT: %w", err)
		}
		slot, ok := v.(int64)
		if !ok {
			return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT replied %v, want an integer", v)
		}
		return int(slot), nil
	}
	return 0, errors.New("redistest: CLUSTER KEYSLOT: no node is running")
}

// NodeForKey returns the primary that serves key now.
func (c *Cluster) NodeForKey(ctx context.Context, key string) (*Server, error) {
	slot, err := c.KeySlot(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.NodeForSlot(ctx, slot)
}

// Kill kills node n with SIGKILL, first noting the slots it served so that
// WaitFailover knows what must move.
func (c *Cluster) Kill(ctx context.Context, n *Server) error {
	if err := c.noteSlots(ctx, n); err != nil {
		return err
	}
	n.Kill()
	return nil
}

// Stop freezes node n with SIGSTOP, first noting the slots it served. The
// rest of the cluster fails it over after the node timeout (1 s), as it
// would a node cut off by the network.
func (c *Cluster) Stop(ctx context.Context, n *Server) error {
	if err := c.noteSlots(ctx, n); err != nil {
		return err
	}
	return n.Stop()
}

// Cont resumes node n after Stop. A primary that was failed over meanwhile
// comes back as a replica of its successor.
func (c *Cluster) Cont(n *Server) error { return n.Cont() }

func (c *Cluster) noteSlots(ctx context.Context, n *Server) error {
	m, err := c.slotMap(ctx)
	if err != nil {
		return fmt.Errorf("redistest: slots of %s: %w", n.Addr(), err)
	}
	var slots []int
	for _, r := range m {
		if r.primary == n.Addr() {
			for s := r.first; s <= r.last; s++ {
				slots = append(slots, s)
			}
		}
	}
	c.mu.Lock()
	c.lost[n] = slots
	c.mu.Unlock()
	return nil
}

// WaitFailover waits until the slots node n served when Kill or Stop took it
// down are served by another node, by the agreement of every running node,
// and returns the node now serving them. With node timeout 1000 ms this
// takes about 2.5 s. A node that served no slots returns nil at once.
func (c *Cluster) WaitFailover(ctx context.Context, n *Server) (*Server, error) {
	c.mu.Lock()
	slots, ok := c.lost[n]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("redistest: wait failover of %s: it was not taken down by Cluster.Kill or Cluster.Stop", n.Addr())
	}
	if len(slots) == 0 {
		return nil, nil
	}
	var owner *Server
	err := retry(ctx, 50*time.Millisecond, func() error {
		var err error
		owner, err = c.agreedOwner(ctx, slots[0])
		switch {
		case err != nil:
			return err
		case owner == n:
			return fmt.Errorf("slot %d still served by %s", slots[0], n.Addr())
		}
		return c.WaitHealthy(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: wait failover of %s: %w", n.Addr(), err)
	}
	return owner, nil
}

// agreedOwner returns the node every running node says serves slot.
func (c *Cluster) agreedOwner(ctx context.Context, slot int) (*Server, error) {
	owner := ""
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		m, err := nodeSlots(ctx, n)
		if err != nil {
			return nil, err
		}
		here := ""
		for _, r := range m {
			if r.first <= slot && slot <= r.last {
				here = r.primary
			}
		}
		if owner != "" && here != owner {
			return nil, fmt.Errorf("nodes disagree on slot %d: %s and %s", slot, owner, here)
		}
		owner = here
	}
	if n := c.node(owner); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("slot %d has no owner in this cluster (%q)", slot, owner)
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all 16384 slots served and knows every other node, and every running
// replica's link to its primary is up.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	if err := retry(ctx, 20*time.Millisecond, func() error { return c.healthy(ctx) }); err != nil {
		return fmt.Errorf("redistest: cluster not healthy: %w", err)
	}
	return nil
}

func (c *Cluster) healthy(ctx context.Context) error {
	replicas := 0
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		info, err := n.Do(ctx, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state %q, want ok", n.Addr(), st)
		}
		if ok := infoField(info, "cluster_slots_ok"); ok != strconv.Itoa(Slots) {
			return fmt.Errorf("%s: cluster_slots_ok %s, want %d", n.Addr(), ok, Slots)
		}
		if known := infoField(info, "cluster_known_nodes"); known != strconv.Itoa(len(c.nodes)) {
			return fmt.Errorf("%s: knows %s nodes, want %d", n.Addr(), known, len(c.nodes))
		}
		repl, err := n.Do(ctx, "INFO", "replication")
		if err != nil {
			return err
		}
		if infoField(repl, "role") == "slave" {
			replicas++
			if link := infoField(repl, "master_link_status"); link != "up" {
				return fmt.Errorf("%s: replica link %q, want up", n.Addr(), link)
			}
		}
	}
	// Every node must see exactly the running replicas as healthy replicas,
	// and only running primaries in its slot map: gossip has then reached
	// every node, a failover can elect any replica, and a client refreshing
	// its topology from any node sees the same cluster. (Replicas are
	// counted in CLUSTER NODES: Redis 7.0 caches its CLUSTER SLOTS reply and
	// adds new replicas to it only seconds later.)
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		m, err := nodeSlots(ctx, n)
		if err != nil {
			return err
		}
		for _, r := range m {
			if p := c.node(r.primary); p == nil || !p.Running() {
				return fmt.Errorf("%s: slots %d-%d served by %s, which is not running", n.Addr(), r.first, r.last, r.primary)
			}
		}
		nodes, err := n.Do(ctx, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		listed := 0
		text, _ := nodes.(string)
		for line := range strings.Lines(text) {
			// <id> <ip:port@bus> <flags> <primary id> ...
			f := strings.Fields(line)
			if len(f) < 3 {
				return fmt.Errorf("%s: CLUSTER NODES line %q: want id, address and flags", n.Addr(), line)
			}
			flags := "," + f[2] + ","
			if strings.Contains(flags, ",slave,") && !strings.Contains(flags, ",fail") {
				listed++
			}
		}
		if listed != replicas {
			return fmt.Errorf("%s: sees %d healthy replicas, want the %d running", n.Addr(), listed, replicas)
		}
	}
	return nil
}
