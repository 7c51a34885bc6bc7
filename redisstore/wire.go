package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Node names the Redis node that holds key's limits: the address of the
// primary serving its slot, as NodeAddr(Slot(key)) says. It does no I/O. A
// per-node circuit breaker (guard) keys its breakers by it. Off a cluster
// (and before the store has connected) there is one node, and Node names
// it without computing the key's slot.
func (s *Store) Node(key string) string {
	if t := s.topo.Load(); t.one {
		return t.addrs[0]
	}
	return s.NodeAddr(Slot(key))
}

// Stalled reports whether node (an address, as Node names it) has stopped
// answering: a connection to it has owed replies for at least d and
// nothing arrived from it since, not even bytes still waiting unread in
// the kernel; or connecting to it has taken d and not finished.
//
// It judges the node by what arrives on the wire, not by how long a call
// took: a call also waits in this process (for a goroutine to run, for the
// client's pipeline to write it, for its reply to be read), and on a busy
// gateway that wait can pass any short deadline while Redis answers in
// microseconds. A node that has sent nothing for d while owing replies is
// slow or gone whatever this process is doing. Bytes unread in the kernel
// are checked on Linux; elsewhere a reply that arrived but was not read for
// d reads as a stall.
func (s *Store) Stalled(node string, d time.Duration) bool {
	return s.wires.stalled(node, d)
}

// Writes reports how many writes (each a write(2) system call) the store's
// client has made on its connections so far, every node's together. Over
// the takes made meanwhile it says how many takes share a write: rueidis
// writes together the commands that wait when its writer runs, and
// Config.FlushDelay makes it wait for more. With a caller's client
// (NewWithClient) it is 0.
func (s *Store) Writes() int64 { return s.wires.writes.Load() }

// wires watches every connection the store's client opens, by node
// address. It is the client's dialer (rueidis.ClientOption.DialCtxFn).
type wires struct {
	writes atomic.Int64 // Write calls on every connection; see Store.Writes
	mu     sync.Mutex
	nodes  map[string]*nodeWires // by address; guarded by mu
}

// nodeWires is one node's open connections and dials in progress.
type nodeWires struct {
	writes  atomic.Int64 // Write calls on its connections, for benchmarks
	mu      sync.Mutex
	conns   map[*wire]struct{}    // guarded by mu
	dialing map[*attempt]struct{} // guarded by mu
}

// attempt is one dial in progress.
type attempt struct {
	start int64           // monotonic ns
	raw   syscall.RawConn // the socket, once made; guarded by nodeWires.mu
}

// epoch is the base of the monotonic times wires keep as integers.
var epoch = time.Now()

func monotonic() int64 { return int64(time.Since(epoch)) }

func (w *wires) node(addr string) *nodeWires {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nodes == nil {
		w.nodes = map[string]*nodeWires{}
	}
	n := w.nodes[addr]
	if n == nil {
		n = &nodeWires{conns: map[*wire]struct{}{}, dialing: map[*attempt]struct{}{}}
		w.nodes[addr] = n
	}
	return n
}

func (w *wires) stalled(addr string, d time.Duration) bool {
	w.mu.Lock()
	n := w.nodes[addr]
	w.mu.Unlock()
	if n == nil {
		return false
	}
	now := monotonic()
	n.mu.Lock()
	defer n.mu.Unlock()
	for a := range n.dialing {
		if now-a.start >= int64(d) && !connected(a.raw) {
			return true
		}
	}
	for c := range n.conns {
		if since := c.owedSince.Load(); since != 0 && now-since >= int64(d) && !c.heard(c.owedMark.Load()) {
			return true
		}
	}
	return false
}

// dial opens a connection to addr for the client and watches it; with tls
// set, the TLS session runs over the watched connection.
func (w *wires) dial(ctx context.Context, addr string, dialer *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	n := w.node(addr)
	a := &attempt{start: monotonic()}
	n.mu.Lock()
	n.dialing[a] = struct{}{}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.dialing, a)
		n.mu.Unlock()
	}()
	// Keep the socket, so that Stalled can ask the kernel whether the node
	// has answered the handshake: a connect slow only because this process
	// has not run to finish it is not the node's stall.
	dl := *dialer
	dl.ControlContext = func(_ context.Context, _, _ string, c syscall.RawConn) error {
		n.mu.Lock()
		a.raw = c
		n.mu.Unlock()
		return nil
	}
	raw, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &wire{Conn: raw, node: n, all: &w.writes}
	if sc, ok := raw.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	n.mu.Lock()
	n.conns[c] = struct{}{}
	n.mu.Unlock()
	if cfg == nil {
		return c, nil
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	// rueidis dials without a deadline on its context: the handshake gets
	// the dialer's, so that a server that never answers it (rediss:// at
	// a plaintext port often does not) cannot hold a dial forever.
	hctx, cancel := context.WithTimeout(ctx, cmp.Or(dialer.Timeout, defaultDialTimeout))
	defer cancel()
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, handshakeError(ctx, addr, dialer, err)
	}
	return tc, nil
}

// wire is one watched connection. owedSince is when the first bytes were
// written after the last bytes read: replies are owed since then, and
// owedMark is how many bytes had been read by then. A read clears
// owedSince, so a node that answers anything is not stalled; a node that
// freezes while still owing replies is noticed by the next write.
type wire struct {
	net.Conn
	raw       syscall.RawConn // for the kernel's count of bytes received; nil if none
	node      *nodeWires
	all       *atomic.Int64 // the store's count of writes
	read      atomic.Int64  // bytes read so far
	owedSince atomic.Int64  // monotonic ns; 0 when nothing is owed
	owedMark  atomic.Int64  // read when owedSince was set
	closeOnce sync.Once
}

func (c *wire) Write(p []byte) (int, error) {
	// Marked before the bytes go out: a reply cannot come before its
	// request, so a read that follows always clears this mark. Marked
	// after, a writer held up past its syscall could set it once the reply
	// had already been read, and an idle connection would owe forever.
	c.node.writes.Add(1)
	c.all.Add(1)
	if len(p) > 0 && c.owedSince.Load() == 0 { // owed already: no clock read
		mark := c.read.Load()
		if c.owedSince.CompareAndSwap(0, monotonic()) {
			c.owedMark.Store(mark)
		}
	}
	return c.Conn.Write(p)
}

func (c *wire) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read.Add(int64(n))
		c.owedSince.Store(0)
	}
	return n, err
}

func (c *wire) Close() error {
	c.closeOnce.Do(func() {
		c.node.mu.Lock()
		delete(c.node.conns, c)
		c.node.mu.Unlock()
	})
	return c.Conn.Close()
}

// heard reports whether the node has sent more than mark bytes on this
// connection. The kernel's count says so even when this process has not
// read them yet, or has read them and not yet noted it: a busy process is
// slow to do either, and that is not the node's stall.
func (c *wire) heard(mark int64) bool {
	got := c.read.Load()
	if c.raw != nil {
		c.raw.Control(func(fd uintptr) { got = max(got, receivedBytes(fd)) })
	}
	return got > mark
}
