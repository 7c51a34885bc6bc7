package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

func Example() {
	clk := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	// The store leases draw from: any limit.Granter. In production the
	// guarded Redis store (pipeline.New builds it); here the in-process one.
	shared := memstore.New(memstore.Config{Now: clk.Now})
	s, _ := lease.New(shared, lease.Config{Fleet: limit.Fleet{Gateways: 1}, Now: clk.Now})
	defer s.Close()

	// A client retrying in a loop against 10 a second: once the shared
	// store has refused it, it is refused from memory until its retry time.
	req := &limit.Request{Key: "k:runaway", Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second, Burst: 1}}}
	for range 3 {
		a, err := s.Take(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(a.Allowed, a.Source, a.RetryAfter)
	}
	clk.Advance(100 * time.Millisecond)
	a, _ := s.Take(context.Background(), req)
	fmt.Println(a.Allowed, a.Source, a.RetryAfter)
	// Output:
	// true memory 0s
	// false memory 100ms
	// false refusal-cache 100ms
	// true memory 0s
}
