package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// waitPipe takes for key until the store's own connection to its node is
// up, so that the takes after it go through it, and returns the node.
func waitPipe(t *testing.T, s *redisstore.Store, key string) string {
	t.Helper()
	node := s.Node(key)
	for deadline := time.Now().Add(5 * time.Second); !redisstore.PipeUp(s, node); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the take connection to %s is not up 5 s after a take", node)
		}
		take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{perSecond("warm", 1000, 1000)}})
	}
	return node
}

// TestPipeCarriesTakes: on a standalone server and a cluster, takes from
// 64 goroutines at once go through one connection of the store's own per
// node and get the answers a take through rueidis would.
func TestPipeCarriesTakes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []string
	}{
		{"standalone", []string{standalone.Addr()}},
		{"cluster", cluster.Addrs()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, redisstore.Config{Addrs: tc.addrs, Prefix: "pipe:"})
			for _, addr := range s.NodeAddrs() {
				for i := 0; s.Node(fmt.Sprint("w", i)) != addr || waitPipe(t, s, fmt.Sprint("w", i)) != addr; i++ {
				}
			}
			before, base := redisstore.PipeTakes(s), uniqueKey(t)
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					key := fmt.Sprintf("%s:%d", base, g)
					for i := range 20 {
						req := &limit.Request{Key: key, Limits: []limit.Limit{perSecond("s", 1, 10)}}
						d, err := s.Take(context.Background(), req)
						if err != nil || d.Allowed != (i < 10) || d.Source != limit.FromRedis {
							t.Errorf("take %d of key %s: got %+v, %v; want allowed %v", i, key, d, err, i < 10)
							return
						}
					}
				})
			}
			wg.Wait()
			// The odd take may go through rueidis while a pipe redials.
			if got := redisstore.PipeTakes(s) - before; got < 64*20*9/10 {
				t.Errorf("%d of %d takes went through the take connections, want nearly all", got, 64*20)
			}
		})
	}
}

// TestPipeFollowsMoved moves a key's slot to another primary behind the
// store's back: the take its pipe sends to the old owner is answered
// MOVED, having run nothing, goes through rueidis instead, which follows
// it, and the store reads the slot map again, so that the next takes go
// through the new owner's pipe.
func TestPipeFollowsMoved(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := t.Context()
	s := newStore(t, redisstore.Config{Addrs: c.Addrs(), RefreshInterval: -1})
	req := &limit.Request{Key: "moved", Limits: []limit.Limit{perSecond("s", 1, 100)}}
	src := waitPipe(t, s, req.Key)
	slot := redisstore.Slot(req.Key)
	var from, to *redistest.Server
	for _, n := range c.Nodes() {
		if n.Addr() == src {
			from = n
		} else {
			to = n
		}
	}
	warm := perSecond("warm", 1000, 1000)
	toID, err := to.Do(ctx, "CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	// An empty slot may be given away at once.
	if _, err := from.Do(ctx, "DEL", s.RedisKey(req.Key, &req.Limits[0]), s.RedisKey(req.Key, &warm)); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if _, err := n.Do(ctx, "CLUSTER", "SETSLOT", fmt.Sprint(slot), "NODE", toID.(string)); err != nil {
			t.Fatalf("CLUSTER SETSLOT on %s: %v", n.Addr(), err)
		}
	}
	if d := take(t, s, req); !d.Allowed || d.Remaining != 99 {
		t.Errorf("take after the move: got %+v, want allowed with 99 left (a fresh bucket)", d)
	}
	for deadline := time.Now().Add(5 * time.Second); s.NodeAddr(slot) != to.Addr(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("NodeAddr(%d) = %s 5 s after a MOVED, want %s", slot, s.NodeAddr(slot), to.Addr())
		}
	}
	waitPipe(t, s, req.Key)
	before := redisstore.PipeTakes(s)
	if d := take(t, s, req); !d.Allowed || d.Remaining != 98 {
		t.Errorf("take on the new owner: got %+v, want allowed with 98 left", d)
	}
	if redisstore.PipeTakes(s) == before {
		t.Error("the take on the new owner did not go through its pipe")
	}
}

// TestPipeKilledNode kills a server while takes wait on its pipe: they
// fail as the server being unavailable, and once it is back the pipe is
// dialled again and carries takes.
func TestPipeKilledNode(t *testing.T) {
	srv := redistest.Standalone(t)
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}})
	req := &limit.Request{Key: "killed", Limits: []limit.Limit{perSecond("s", 1000, 1000)}}
	node := waitPipe(t, s, req.Key)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	before := redisstore.PipeTakes(s)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := s.Take(ctx, req); !errors.Is(err, redisstore.ErrUnavailable) {
				t.Errorf("take owed by a killed server: got %v, want ErrUnavailable", err)
			}
		})
	}
	for redisstore.PipeTakes(s) < before+8 {
		time.Sleep(time.Millisecond)
	}
	srv.Kill()
	wg.Wait()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !redisstore.PipeUp(s, node); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pipe is not up again 10 s after the server restarted")
		}
	}
	before = redisstore.PipeTakes(s)
	take(t, s, req)
	if redisstore.PipeTakes(s) == before {
		t.Error("the take after the restart did not go through the pipe")
	}
}

// TestPipeCallerGivesUp freezes the server while a take waits on the
// pipe: the take ends with its context, the node reads as stalled, and
// the reply that comes once the server runs again goes to nobody, not to
// the next take.
func TestPipeCallerGivesUp(t *testing.T) {
	srv := redistest.Standalone(t)
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}})
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{{Name: "h", Count: 1, Period: time.Hour, Burst: 10}}}
	node := waitPipe(t, s, "warm")
	take(t, s, req) // 9 left
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := s.Take(ctx, req) // runs once the server does: 8 left
	cancel()
	if !errors.Is(err, redisstore.ErrTimeout) {
		t.Errorf("take on a frozen server: got %v, want ErrTimeout", err)
	}
	if !s.Stalled(node, 50*time.Millisecond) {
		t.Error("a node frozen for 100 ms while owing a reply does not read as stalled for 50 ms")
	}
	if err := srv.Cont(); err != nil {
		t.Fatal(err)
	}
	before := redisstore.PipeTakes(s)
	if d := take(t, s, req); d.Remaining != 7 {
		t.Errorf("the take after: got %+v, want 7 left (its own reply, after the given-up take's)", d)
	}
	if redisstore.PipeTakes(s) == before {
		t.Error("the take after did not go through the pipe")
	}
}

// TestPipeTLSAndACL: the pipe dials as the client does, over mutual TLS
// and as an ACL user.
func TestPipeTLSAndACL(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.StandaloneTLS(t, redistest.TLS{Certs: certs, ClientAuth: true})
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "sluice", "on", ">pipe-pw-8080", "~sl:*", "+@all", "-@dangerous"},
		{"CONFIG", "SET", "requirepass", "default-pw-4242"},
	} {
		if _, err := srv.Do(t.Context(), cmd...); err != nil {
			t.Fatalf("%v: %v", cmd[:2], err)
		}
	}
	tc, err := redisstore.TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, redisstore.Config{Addrs: []string{srv.TLSAddr()}, TLS: tc, Username: "sluice", Password: "pipe-pw-8080"})
	waitPipe(t, s, "tls")
	before := redisstore.PipeTakes(s)
	take(t, s, &limit.Request{Key: "tls", Limits: []limit.Limit{perSecond("s", 10, 10)}})
	if redisstore.PipeTakes(s) == before {
		t.Error("the take did not go through the pipe")
	}
}

// wrapped is a client wrapped as tracing wraps one.
type wrapped struct{ rueidis.Client }

// TestPipeOnlyUnwrapped: a Wrap that returns the client as it is leaves
// takes to the store's own connections; one that wraps it, and
// RueidisTakes, send every take through the client.
func TestPipeOnlyUnwrapped(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  redisstore.Config
		pipe bool
	}{
		{"identity", redisstore.Config{Wrap: func(c rueidis.Client) rueidis.Client { return c }}, true},
		{"wrapper", redisstore.Config{Wrap: func(c rueidis.Client) rueidis.Client { return wrapped{c} }}, false},
		{"RueidisTakes", redisstore.Config{RueidisTakes: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Addrs = []string{standalone.Addr()}
			s := newStore(t, tc.cfg)
			for range 20 {
				take(t, s, &limit.Request{Key: "wrap", Limits: []limit.Limit{perSecond("s", 1000, 1000)}})
				time.Sleep(time.Millisecond)
			}
			if got := redisstore.PipeTakes(s) > 0; got != tc.pipe {
				t.Errorf("takes on the store's own connection: got %v, want %v", got, tc.pipe)
			}
		})
	}
}

// TestPipeRetired: a node that leaves the slot map has its take connection
// closed once it owes nothing, and not dialled again (it used to be
// redialled every 2 s for good); a take for a node still served opens a
// new one.
func TestPipeRetired(t *testing.T) {
	srv := redistest.Standalone(t)
	nodes := []*redistest.Server{srv}
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}, Prefix: "retire:"})
	waitPipe(t, s, "k")
	takes := func() int { return namedClients(t, nodes, "sluice-takes")[srv.Addr()] }
	if got := takes(); got != 1 {
		t.Fatalf("%d take connections before, want 1", got)
	}
	redisstore.KeepPipes(s, nil)
	for deadline := time.Now().Add(5 * time.Second); takes() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the retired take connection is still open 5 s later")
		}
	}
	time.Sleep(500 * time.Millisecond) // past the first redial's 100 ms
	if got := takes(); got != 0 {
		t.Fatalf("%d take connections 500 ms after retiring, want 0: the retired pipe dialled again", got)
	}
	waitPipe(t, s, "k")
	if got := takes(); got != 1 {
		t.Errorf("%d take connections after a take for the node, want 1", got)
	}
}

// TestUnknownCommandRecognised: the reply of a node that lacks a command,
// as rueidis gives it (without "ERR "), reads as one, so that a node before
// Redis 7 (no FUNCTION) is taken for what it is, not logged as a failure.
func TestUnknownCommandRecognised(t *testing.T) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{standalone.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Do(t.Context(), c.B().Arbitrary("NOSUCHCOMMAND").Build()).Error()
	if !redisstore.IsUnknownCommand(err) {
		t.Errorf("isUnknownCommand(%q) = false, want true", err)
	}
	if err := c.Do(t.Context(), c.B().Arbitrary("FCALL").Args("nosuchfunction", "0").Build()).Error(); redisstore.IsUnknownCommand(err) {
		t.Errorf("isUnknownCommand(%q) = true, want false", err)
	}
}
