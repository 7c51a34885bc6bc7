package redisstore

import (
	"context"

	"github.com/redis/rueidis"
)

// TrivialScript returns a function that runs the script "return 1" through
// s's own client, by EVALSHA, with keys routing it to the node a Take for
// them goes to. Benchmarks measure Take against it: the same client, server
// and round trip with no work in the script, the ceiling for Take.
func TrivialScript(s *Store) func(ctx context.Context, keys []string) error {
	script := rueidis.NewLuaScript("return 1")
	return func(ctx context.Context, keys []string) error {
		return script.Exec(ctx, s.client, keys, nil).Error()
	}
}
