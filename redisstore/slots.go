package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

//go:embed slots.lua
var slotsScript string

// slotsLua runs slots.lua by digest, loading it on a NOSCRIPT.
var slotsLua = rueidis.NewLuaScript(slotsScript)

// SlotsKey returns the Redis key of request key's concurrency slots, in
// the key's slot beside its buckets.
func (s *Store) SlotsKey(key string) string {
	b := append([]byte(s.prefix), '{')
	b = appendEncoded(b, key)
	return string(append(b, "}:c"...))
}

// Acquire takes one of most concurrency slots of request key for the slot
// id, dropping first the slots older than life (their gateway never
// released them). It reports whether the slot was taken, how many are in
// flight, and when refused how long until the oldest slot's life ends.
func (s *Store) Acquire(ctx context.Context, key, id string, most int64, life time.Duration) (taken bool, inFlight int64, wait time.Duration, err error) {
	l := s.link.Load()
	if l == nil {
		return false, 0, 0, s.errNotConnected()
	}
	ms := max(life.Milliseconds(), 1)
	vals, err := slotsLua.Exec(ctx, l.client, []string{s.SlotsKey(key)},
		[]string{id, strconv.FormatInt(most, 10), strconv.FormatInt(ms, 10)}).ToArray()
	if err != nil {
		return false, 0, 0, fmt.Errorf("redisstore: acquire a slot of %q: %w", key, err)
	}
	if len(vals) != 3 {
		return false, 0, 0, fmt.Errorf("redisstore: acquire a slot of %q: got %d values, want 3", key, len(vals))
	}
	var n [3]int64
	for i, v := range vals {
		if n[i], err = v.AsInt64(); err != nil {
			return false, 0, 0, fmt.Errorf("redisstore: acquire a slot of %q: value %d: %w", key, i, err)
		}
	}
	return n[0] == 1, n[1], time.Duration(n[2]) * time.Millisecond, nil
}

// Release gives back the slot id of request key. Releasing a slot that
// expired or was never taken does nothing.
func (s *Store) Release(ctx context.Context, key, id string) error {
	l := s.link.Load()
	if l == nil {
		return s.errNotConnected()
	}
	if err := l.client.Do(ctx, l.client.B().Zrem().Key(s.SlotsKey(key)).Member(id).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: release slot of %q: %w", key, err)
	}
	return nil
}
