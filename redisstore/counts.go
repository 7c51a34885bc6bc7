package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// Count is one addition to a plain counter of a request key, such as a
// quota's count of one period (package quota): the counter lives at
// <prefix>{<encoded key>}:q:<Counter>, in the key's slot beside its
// buckets.
type Count struct {
	// Key is the request key, and Counter the counter's name within it.
	Key, Counter string
	// Delta is added to the counter; 0 only reads it.
	Delta int64
	// ExpireAt is when Redis may drop the counter; zero keeps its expiry.
	ExpireAt time.Time
	// Total is set by AddCounts: the counter's value after the addition.
	Total int64
}

// CounterKey returns the Redis key of counter of request key.
func (s *Store) CounterKey(key, counter string) string {
	b := append([]byte(s.prefix), '{')
	b = appendEncoded(b, key)
	b = append(b, "}:q:"...)
	return string(append(b, counter...))
}

// AddCounts adds every count's Delta to its counter and sets each Total,
// in one round trip per node (INCRBY and PEXPIREAT pipelined; a Delta of 0
// is a GET). An error leaves the Totals unset; the additions may or may
// not have been made.
func (s *Store) AddCounts(ctx context.Context, counts []Count) error {
	l := s.link.Load()
	if l == nil {
		return s.errNotConnected()
	}
	c := l.client
	cmds := make(rueidis.Commands, 0, 2*len(counts))
	for i := range counts {
		k := s.CounterKey(counts[i].Key, counts[i].Counter)
		if counts[i].Delta == 0 {
			cmds = append(cmds, c.B().Get().Key(k).Build())
			continue
		}
		cmds = append(cmds, c.B().Incrby().Key(k).Increment(counts[i].Delta).Build())
		if !counts[i].ExpireAt.IsZero() {
			cmds = append(cmds, c.B().Pexpireat().Key(k).MillisecondsTimestamp(counts[i].ExpireAt.UnixMilli()).Build())
		}
	}
	res := c.DoMulti(ctx, cmds...)
	j := 0
	for i := range counts {
		r := res[j]
		j++
		if counts[i].Delta != 0 && !counts[i].ExpireAt.IsZero() {
			if err := res[j].Error(); err != nil {
				return fmt.Errorf("redisstore: expire counter %s of %q: %w", counts[i].Counter, counts[i].Key, err)
			}
			j++
		}
		n, err := r.AsInt64()
		if rueidis.IsRedisNil(err) {
			n, err = 0, nil
		}
		if err != nil {
			return fmt.Errorf("redisstore: add %d to counter %s of %q: %w", counts[i].Delta, counts[i].Counter, counts[i].Key, err)
		}
		counts[i].Total = n
	}
	return nil
}

// ReadCounts returns the values of counters of request key, 0 for one
// that does not exist, in one round trip.
func (s *Store) ReadCounts(ctx context.Context, key string, counters []string) ([]int64, error) {
	cs := make([]Count, len(counters))
	for i, name := range counters {
		cs[i] = Count{Key: key, Counter: name}
	}
	if err := s.AddCounts(ctx, cs); err != nil {
		return nil, err
	}
	out := make([]int64, len(cs))
	for i := range cs {
		out[i] = cs[i].Total
	}
	return out, nil
}
