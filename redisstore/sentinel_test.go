package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestSentinel runs the suite through Redis Sentinel, then kills the
// primary while takes run and checks what a gateway would see: takes fail
// as timeouts or unavailability, never as bad replies, until the Sentinels
// promote the replica; then takes are decided again, on the new primary,
// which NodeAddr names.
func TestSentinel(t *testing.T) {
	d := redistest.StartSentinels(t, 1, 3)
	cfg, err := redisstore.ParseAddrs("redis-sentinel://" + strings.Join(d.Addrs(), ",") + "/" + redistest.MasterSet)
	if err == nil {
		// The URL form names one master set per URL; the others are plain
		// addresses after it.
		t.Fatalf("ParseAddrs of a master set after a comma-joined host list: got %+v, want an error", cfg)
	}
	cfg, err = redisstore.ParseAddrs("redis-sentinel://" + d.Addrs()[0] + "/" + redistest.MasterSet + "," + strings.Join(d.Addrs()[1:], ","))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RefreshInterval = 100 * time.Millisecond
	t.Run("Conformance", func(t *testing.T) {
		limittest.Run(t, func(t *testing.T, now func() time.Time) limit.Store {
			c := cfg
			c.Now = now
			return newStore(t, c)
		})
	})
	t.Run("OwnClock", func(t *testing.T) {
		limittest.RunOwnClock(t, func(t *testing.T) limit.Store { return newStore(t, cfg) })
	})

	s := newStore(t, cfg)
	if got, want := s.NodeAddrs(), []string{d.Primary.Addr()}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("NodeAddrs before the failover: got %v, want the primary %v", got, want)
	}
	// Load: four goroutines taking from their own keys without pause.
	var (
		decided, failed atomic.Int64
		badReply        atomic.Value
		wg              sync.WaitGroup
	)
	ctx, stop := context.WithCancel(t.Context())
	for i := range 4 {
		wg.Go(func() {
			req := &limit.Request{Key: fmt.Sprint("sentinel-load-", i), Limits: []limit.Limit{perSecond("s", 1_000_000, 1_000_000)}}
			for ctx.Err() == nil {
				tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				_, err := s.Take(tctx, req)
				cancel()
				switch {
				case err == nil:
					decided.Add(1)
				case ctx.Err() != nil:
				case errors.Is(err, redisstore.ErrTimeout), errors.Is(err, redisstore.ErrUnavailable):
					failed.Add(1)
					time.Sleep(5 * time.Millisecond)
				default:
					badReply.Store(err)
					failed.Add(1)
				}
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	waitDecided := func(what string, n int64, within time.Duration) {
		t.Helper()
		base := decided.Load()
		for deadline := time.Now().Add(within); decided.Load() < base+n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d takes decided in %v, want %d (%d failed)", what, decided.Load()-base, within, n, failed.Load())
			}
		}
	}
	waitDecided("before the kill", 100, 10*time.Second)

	old := d.Primary.Addr()
	d.Primary.Kill()
	began := time.Now()
	wctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	heir, err := d.WaitPrimary(wctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if want := d.Replicas[0].Addr(); heir != want {
		t.Fatalf("Sentinels promoted %s, want the replica %s", heir, want)
	}
	promoted := time.Since(began)
	waitDecided("after the promotion", 100, 20*time.Second)
	t.Logf("replica promoted %v after the kill; takes decided again by %v (%d failed meanwhile)",
		promoted.Round(10*time.Millisecond), time.Since(began).Round(10*time.Millisecond), failed.Load())
	if err := badReply.Load(); err != nil {
		t.Errorf("a take while the primary was down: %v, want ErrTimeout or ErrUnavailable", err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.Node("any") != heir; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Node 5s after the promotion: got %s, want the new primary %s", s.Node("any"), heir)
		}
	}
}
