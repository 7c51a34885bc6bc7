package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/redisstore"
)

// newClient dials a rueidis client of the test's own, closed when the test
// ends (after the stores on it, which Cleanup closes first).
func newClient(t *testing.T, addrs []string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true, AlwaysPipelining: true})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// A store on the caller's client passes the suite, and closing it leaves
// the client to its owner.
func TestNewWithClient(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			c := newClient(t, tg.addrs())
			limittest.Run(t, func(t *testing.T, now func() time.Time) limit.Store {
				s, err := redisstore.NewWithClient(t.Context(), c, redisstore.Config{Now: now})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				return s
			})
			s, err := redisstore.NewWithClient(t.Context(), c, redisstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := s.Cluster(), tg.name == "Cluster"; got != want {
				t.Errorf("Cluster() = %v, want %v", got, want)
			}
			if got := len(s.NodeAddrs()); got < 1 {
				t.Errorf("NodeAddrs() names %d nodes, want at least 1", got)
			}
			s.Close()
			if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil {
				t.Errorf("the caller's client after the store closed: PING: %v, want it open", err)
			}
		})
	}
}

func TestNewWithClientRefuses(t *testing.T) {
	c := newClient(t, []string{standalone.Addr()})
	for _, tt := range []struct {
		name   string
		client rueidis.Client
		cfg    redisstore.Config
		want   string
	}{
		{"nil client", nil, redisstore.Config{}, "client is nil"},
		{"addresses", c, redisstore.Config{Addrs: []string{standalone.Addr()}}, "are the client's"},
		{"password", c, redisstore.Config{Password: "x"}, "are the client's"},
		{"flush delay", c, redisstore.Config{FlushDelay: time.Millisecond}, "are the client's"},
		{"brace in prefix", c, redisstore.Config{Prefix: "a{"}, "brace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redisstore.NewWithClient(t.Context(), tt.client, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
