package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// A key with two limits: a request passes only if both allow it, and the
// decision describes the tightest one.
func ExampleStore_Take() {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.Config{Now: clock.Now})
	req := &limit.Request{Key: "k:key_8f3", Limits: []limit.Limit{
		{Name: "s", Count: 2, Period: time.Second, Burst: 3},
		{Name: "m", Count: 100, Period: time.Minute},
	}}
	for range 4 {
		d, err := store.Take(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v limit=%s remaining=%d retry=%v\n", d.Allowed, req.Limits[d.Index].Name, d.Remaining, d.RetryAfter)
	}
	clock.Advance(500 * time.Millisecond)
	d, _ := store.Take(context.Background(), req)
	fmt.Printf("after 500ms: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=true limit=s remaining=2 retry=0s
	// allowed=true limit=s remaining=1 retry=0s
	// allowed=true limit=s remaining=0 retry=0s
	// allowed=false limit=s remaining=0 retry=500ms
	// after 500ms: allowed=true remaining=0
}
