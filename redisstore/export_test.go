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

// UseScripts makes s run its takes as a script by EVALSHA, as it does on a
// server without functions (before Redis 7), so that tests cover that path
// on the servers they have.
func UseScripts(s *Store) { s.functions = false }

// UsesFunctions reports whether s calls its takes with FCALL.
func UsesFunctions(s *Store) bool { return s.functions }

// FloorScript returns a function that runs, by EVALSHA through s's client,
// the least any take must do with Redis's clock: TIME, then GET and PSETEX
// of each key, and a reply of 1+4n integers, with no arithmetic. What it
// costs Redis is the floor under the take's cost.
func FloorScript(s *Store) func(ctx context.Context, keys []string) error {
	script := rueidis.NewLuaScript(`
local t = redis.call('TIME')
local reply = {1}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  redis.call('PSETEX', KEYS[i], 60000, '59999880008 1796225705893')
  reply[4 * i - 2], reply[4 * i - 1], reply[4 * i], reply[4 * i + 1] = 1, 999999, 0, 60000
end
return reply`)
	return func(ctx context.Context, keys []string) error {
		return script.Exec(ctx, s.client, keys, nil).Error()
	}
}
