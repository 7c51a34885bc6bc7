package balancer_test

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/share"
)

// Two regions report one key's traffic; the third reports none of it. Each
// region's share follows its traffic, and the quiet one keeps the minimum.
func ExampleCore() {
	c, err := balancer.NewCore(balancer.CoreConfig{Regions: []string{"us", "eu", "ap"}})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, r := range []struct {
		region string
		asked  int64
	}{{"us", 600}, {"eu", 300}, {"ap", 0}} {
		rep := balancer.Report{Region: r.region, Gateway: r.region + "-1", SpanMillis: 10_000, Total: r.asked + 100}
		if r.asked > 0 {
			rep.Pairs = []balancer.PairReport{{Key: "k:abc", Limit: "s", Asked: r.asked, Admitted: r.asked}}
		}
		if _, err := c.Report(now, rep); err != nil {
			panic(err)
		}
	}
	p := c.Rebalance(now.Add(time.Second))
	fmt.Println("k:abc:", p.Pairs[share.Pair{Key: "k:abc", Limit: "s"}].Shares)
	fmt.Println("default:", p.Defaults)
	// Output:
	// k:abc: [633333 316666 50000]
	// default: [583333 333333 83333]
}
