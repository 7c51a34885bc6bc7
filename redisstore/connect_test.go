package redisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestStartsWhileRedisIsDown starts a store on the port of a stopped
// server: New succeeds, takes fail fast as unavailable, Down names the
// node, and once the server is back on that port the store connects by
// itself and takes are shared again.
func TestStartsWhileRedisIsDown(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}})
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{perSecond("s", 1, 5)}}
	if _, err := s.Take(t.Context(), req); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Take while Redis is down: got %v, want ErrUnavailable", err)
	}
	if got := s.Node(req.Key); got != srv.Addr() {
		t.Errorf("Node while unconnected: got %q, want %q", got, srv.Addr())
	}
	if got := s.Down(t.Context()); len(got) != 1 || got[0] != srv.Addr() {
		t.Errorf("Down while Redis is down: got %v, want [%s]", got, srv.Addr())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := s.Take(t.Context(), req)
		if err == nil {
			if !d.Allowed || d.Source != limit.FromRedis {
				t.Errorf("first take after Redis came back: got %+v, want allowed from redis", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not connected 10s after Redis came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.Down(t.Context()); len(got) != 0 {
		t.Errorf("Down once Redis is back: got %v, want none", got)
	}
	if got, err := srv.Do(t.Context(), "EXISTS", s.RedisKey(req.Key, &req.Limits[0])); err != nil || got != int64(1) {
		t.Errorf("the bucket in Redis: EXISTS answered %v, %v; want 1", got, err)
	}
}

// TestTLSToPlaintextPort points TLS at a plaintext Redis port: New fails
// with an error naming the address and the problem, rather than hanging in
// the handshake or starting as if Redis were down.
func TestTLSToPlaintextPort(t *testing.T) {
	certs := redistest.NewCerts(t)
	tlsCfg, err := redisstore.TLSFiles{CA: certs.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.New(t.Context(), redisstore.Config{Addrs: []string{standalone.Addr()}, TLS: tlsCfg, DialTimeout: 300 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("New with TLS to a plaintext port succeeded, want an error")
	}
	if errors.Is(err, redisstore.ErrUnavailable) {
		t.Errorf("got %v: an outage, want a configuration error", err)
	}
	for _, want := range []string{standalone.Addr(), "TLS handshake", "plaintext"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// silentListener accepts connections and never answers, like a frozen
// server; it returns its address.
func silentListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return ln.Addr().String()
}

// TestSilentServerAtStart connects to a server that accepts and never
// answers, in plaintext and in TLS: every step has a deadline, so New
// returns a store that is still connecting, not an error and not a hang.
func TestSilentServerAtStart(t *testing.T) {
	addr := silentListener(t)
	for _, tc := range []struct {
		name string
		cfg  redisstore.Config
	}{
		{"plaintext", redisstore.Config{Addrs: []string{addr}, DialTimeout: 100 * time.Millisecond, ConnTimeout: 100 * time.Millisecond}},
		{"tls", redisstore.Config{Addrs: []string{addr}, DialTimeout: 100 * time.Millisecond, ConnTimeout: 100 * time.Millisecond,
			TLS: &tls.Config{MinVersion: tls.VersionTLS12}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, tc.cfg)
			if got := s.Down(t.Context()); len(got) != 1 || got[0] != addr {
				t.Errorf("Down: got %v, want [%s]", got, addr)
			}
		})
	}
}

// TestNewHonoursCancel cancels New while it waits on a silent server with
// long timeouts: it returns the cancellation at once, as a gateway sent
// SIGTERM during its start must.
func TestNewHonoursCancel(t *testing.T) {
	addr := silentListener(t)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	s, err := redisstore.New(ctx, redisstore.Config{Addrs: []string{addr}, DialTimeout: time.Minute, ConnTimeout: time.Minute,
		TLS: &tls.Config{MinVersion: tls.VersionTLS12}})
	if err == nil {
		s.Close()
		t.Fatal("New succeeded after its context was cancelled, want an error")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestClusterDownAtStart starts a store on the seeds of a Redis Cluster
// whose nodes are all down: every key is on one unknown node, named by the
// seeds, until the cluster is back; then the store reads the slot map and
// takes reach each key's own primary.
func TestClusterDownAtStart(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	nodes := c.Nodes()
	for _, n := range nodes {
		n.Kill()
	}
	s := newStore(t, redisstore.Config{Addrs: c.Addrs()})
	unknown := strings.Join(c.Addrs(), ",")
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{perSecond("s", 1, 5)}}
	if got := s.Node(req.Key); got != unknown {
		t.Errorf("Node while the cluster is down: got %q, want %q", got, unknown)
	}
	if got := s.Down(t.Context()); len(got) != 1 || got[0] != unknown {
		t.Errorf("Down while the cluster is down: got %v, want [%s]", got, unknown)
	}
	if _, err := s.Take(t.Context(), req); !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Take while the cluster is down: got %v, want ErrUnavailable", err)
	}
	for _, n := range nodes {
		if err := n.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := s.Take(t.Context(), req)
		if err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing 30s after the cluster came back: %+v, %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !s.Cluster() {
		t.Error("Cluster() after connecting: false, want true")
	}
	owner, err := c.NodeForKey(t.Context(), s.RedisKey(req.Key, &req.Limits[0]))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Node(req.Key); got != owner.Addr() {
		t.Errorf("Node once connected: got %q, want the key's primary %s", got, owner.Addr())
	}
	if got := s.Down(t.Context()); len(got) != 0 {
		t.Errorf("Down once the cluster is back: got %v, want none", got)
	}
}
