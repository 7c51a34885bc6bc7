package quota_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/quota"
)

// A daily quota of 3, counted in batches over an in-process Memory (a
// gateway would use Redis).
func Example() {
	clock := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	b, err := quota.New(&quota.Memory{}, quota.Config{Interval: time.Hour, Now: func() time.Time { return clock }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	qs := []quota.Quota{{Name: "daily", Count: 3, Period: quota.Day}}
	for range 4 {
		d, err := b.Take(context.Background(), "k:key_pro", qs, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	}
	// Output:
	// true 2 15h0m0s
	// true 1 15h0m0s
	// true 0 15h0m0s
	// false 0 15h0m0s
}
