package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

func TestTakeUpToConformance(t *testing.T) {
	limittest.RunGranter(t, func(t *testing.T, now func() time.Time) limit.Granter {
		return memstore.New(memstore.Config{Now: now})
	})
}

func ExampleStore_TakeUpTo() {
	s := memstore.New(memstore.Config{})
	req := &limit.Request{Key: "k:alice", Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second}}}
	for range 3 {
		granted, d, _ := s.TakeUpTo(context.Background(), req, 4)
		fmt.Println("granted", granted, "remaining", d.Remaining)
	}
	// Output:
	// granted 4 remaining 6
	// granted 4 remaining 2
	// granted 2 remaining 0
}
