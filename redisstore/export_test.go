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
		return script.Exec(ctx, s.link.Load().client, keys, nil).Error()
	}
}

// UseScripts makes s run its takes as a script by EVALSHA, as it does on a
// server without functions (before Redis 7), so that tests cover that path
// on the servers they have.
func UseScripts(s *Store) {
	l := *s.link.Load()
	l.functions = false
	s.link.Store(&l)
}

// UsesFunctions reports whether s calls its takes with FCALL.
func UsesFunctions(s *Store) bool { return s.link.Load().functions }

// FloorScript returns a function that runs, by EVALSHA through s's client,
// the commands a take of token buckets that exist runs, and nothing else:
// GET of each key, PTTL of the first (the clock), PSETEX of each, and a
// reply of one 24-byte string per key, as a take that passes replies. What
// it costs Redis is the floor under the take's cost.
func FloorScript(s *Store) func(ctx context.Context, keys []string) error {
	script := rueidis.NewLuaScript(`
local pttl = redis.call('PTTL', KEYS[1])
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  redis.call('PSETEX', KEYS[i], '60000', 'abcdefghijklmnopqrstuvwx')
end
return string.rep('abcdefghijklmnopqrstuvwx', #KEYS)`)
	return func(ctx context.Context, keys []string) error {
		return script.Exec(ctx, s.link.Load().client, keys, nil).Error()
	}
}

// Writes reports how many writes s's client has made on its connections,
// every node's together.
func Writes(s *Store) int64 {
	s.wires.mu.Lock()
	defer s.wires.mu.Unlock()
	var n int64
	for _, nw := range s.wires.nodes {
		n += nw.writes.Load()
	}
	return n
}

// PipeUp reports whether s's own connection for takes to node addr is up
// (direct.go).
func PipeUp(s *Store, addr string) bool {
	m := s.pipes.Load()
	if m == nil || (*m)[addr] == nil {
		return false
	}
	p := (*m)[addr]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur != nil
}

// PipeTakes reports how many takes s has sent on its own connections.
func PipeTakes(s *Store) int64 {
	var n int64
	if m := s.pipes.Load(); m != nil {
		for _, p := range *m {
			p.mu.Lock()
			n += p.sent
			p.mu.Unlock()
		}
	}
	return n
}

// KeepPipes retires s's take connections to nodes not in addrs, as a read
// of the slot map without them does.
func KeepPipes(s *Store, addrs []string) { s.keepPipes(addrs) }

// IsUnknownCommand is isUnknownCommand, for a test with a real reply.
var IsUnknownCommand = isUnknownCommand

// PipeAddrs lists the nodes s keeps a connection for takes to, up or
// redialling (direct.go).
func PipeAddrs(s *Store) []string {
	var addrs []string
	for addr := range *s.pipes.Load() {
		addrs = append(addrs, addr)
	}
	return addrs
}
