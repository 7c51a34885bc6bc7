package guard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/limit"
)

// down is a shared store that cannot be reached.
type down struct{}

func (down) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

func (down) TakeUpTo(context.Context, *limit.Request, int64) (int64, limit.Decision, error) {
	return 0, limit.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

func Example() {
	// Four gateways: while the shard is down each enforces 2/4 of a limit.
	s, err := guard.New(down{}, guard.Config{Fleet: limit.Fleet{Gateways: 4}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	orders := &limit.Request{Key: "k:alice", Limits: []limit.Limit{{Name: "s", Count: 100, Period: time.Second}}}
	_, a, _ := s.TakeUpTo(ctx, orders, 1)
	fmt.Println(a.Allowed, a.Source, a.Remaining)

	login := &limit.Request{Key: "k:alice", Limits: []limit.Limit{{Name: "login", Count: 5, Period: time.Minute, FailClosed: true}}}
	_, err = s.Take(ctx, login)
	fmt.Println(errors.Is(err, guard.ErrUnavailable))
	// Output:
	// true local-fallback 49
	// true
}
