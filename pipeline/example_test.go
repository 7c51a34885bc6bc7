package pipeline_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// With no Redis the pipeline is the in-process store: the embedded default.
func Example() {
	p, err := pipeline.New(context.Background(), pipeline.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	req := &limit.Request{Key: "k:demo", Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Second}}}
	for range 2 {
		d, _ := p.Take(context.Background(), req)
		fmt.Println(d.Allowed, d.Source)
	}
	// Output:
	// true memory
	// false memory
}

// The production stack over a Redis Cluster, as the sluice gateway builds
// it: leases over the guard over the Redis store. Pass it to
// gateway.Config.Store.
func Example_redis() {
	p, err := pipeline.New(context.Background(), pipeline.Config{
		Redis: redisstore.Config{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}},
		Fleet: limit.Fleet{Gateways: 300}, // or Count: the rules service's count
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	d, err := p.Take(context.Background(), &limit.Request{Key: "k:key_8f3", Limits: []limit.Limit{
		{Name: "s", Count: 100, Period: time.Second, Burst: 200},
		{Name: "m", Count: 5000, Period: time.Minute},
	}})
	fmt.Println(d.Allowed, d.Source, err)
}
