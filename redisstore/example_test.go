package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// A store needs a Redis: this example starts a throwaway redis-server with
// the test harness, where a program would pass its own addresses.
func ExampleStore_Take() {
	srv, stop, err := redistest.NewStandalone()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := context.Background()
	s, err := redisstore.New(ctx, redisstore.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	// Two requests a second, and at most 5 a minute, for one API key.
	req := &limit.Request{Key: "key:3f9a", Limits: []limit.Limit{
		{Name: "s", Count: 2, Period: time.Second},
		{Name: "m", Count: 5, Period: time.Minute},
	}}
	for range 3 {
		d, err := s.Take(ctx, req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed %v, %d left on limit %q\n", d.Allowed, d.Remaining, req.Limits[d.Index].Name)
	}
	// Output:
	// allowed true, 1 left on limit "s"
	// allowed true, 0 left on limit "s"
	// allowed false, 0 left on limit "s"
}

// Slot tells which cluster slot, and so which shard, holds a request key's
// buckets. A brace in a request key is just another byte of it: unlike in a
// raw Redis key, it cannot choose the slot.
func ExampleSlot() {
	fmt.Println(redisstore.Slot("user1000"), redisstore.Slot("{user1000}"), redisstore.Slot("user1000}"))
	// Output: 3443 2807 15234
}

// An embedder that already has a rueidis client, instrumented or shared
// with its own commands, hands it to the store. The client stays the
// embedder's: close it after the store.
func ExampleNewWithClient() {
	srv, stop, err := redistest.NewStandalone()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	ctx := context.Background()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	s, err := redisstore.NewWithClient(ctx, client, redisstore.Config{Prefix: "app:rl:"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	req := &limit.Request{Key: "key:3f9a", Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Second}}}
	d, err := s.Take(ctx, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := client.Do(ctx, client.B().Exists().Key(s.RedisKey(req.Key, &req.Limits[0])).Build()).AsInt64()
	fmt.Println(d.Allowed, n, err)
	// Output: true 1 <nil>
}
