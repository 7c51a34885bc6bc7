package share_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/share"
)

// A region that the balancer gave 60% of one key's limit admits 60% of it;
// other keys get the region's default share.
func ExampleStore() {
	s, err := share.New(memstore.New(memstore.Config{}), share.Config{Regions: 3})
	if err != nil {
		panic(err)
	}
	s.Set(&share.Table{Version: 1, Default: 200_000, Shares: map[share.Pair]uint32{
		{Key: "k:busy", Limit: "m"}: 600_000,
	}})
	m := limit.Limit{Name: "m", Count: 100, Period: time.Minute}
	for _, key := range []string{"k:busy", "k:quiet"} {
		admitted := 0
		for range 100 {
			d, err := s.Take(context.Background(), &limit.Request{Key: key, Limits: []limit.Limit{m}})
			if err == nil && d.Allowed {
				admitted++
			}
		}
		fmt.Printf("%s: %d of 100 a minute\n", key, admitted)
	}
	// Output:
	// k:busy: 60 of 100 a minute
	// k:quiet: 20 of 100 a minute
}
