package relay_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/relay"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// BenchmarkSubLease measures one sub-lease of a busy key: from the relay's
// lease store in process (the baseline), and through Client and Server
// over loopback HTTP, the hop a relay adds. Compare the two as a ratio.
func BenchmarkSubLease(b *testing.B) {
	inner := memstore.New(memstore.Config{})
	ls, err := lease.New(inner, lease.Config{Fleet: limit.Fleet{Gateways: 2}, WaitForRefill: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ls.Close()
	srv, err := relay.NewServer(relay.ServerConfig{Store: ls, TrustedNetwork: true})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c, err := relay.NewClient(relay.ClientConfig{URLs: []string{hs.URL}, Direct: inner, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	big := limit.Limit{Name: "s", Count: 1 << 40, Period: time.Second, Burst: 1 << 40}
	for _, tc := range []struct {
		name string
		l    lease.Leaser
	}{{"in-process", ls}, {"over-http", c}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := &limit.Request{Key: "k:busy", Limits: []limit.Limit{big}}
				for pb.Next() {
					if _, err := tc.l.Lease(context.Background(), req, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
