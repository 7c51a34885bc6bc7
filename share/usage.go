package share

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// usageShards spreads the usage counters over this many locks, so that
// concurrent requests for different keys seldom wait for each other.
const usageShards = 32

// counter is one pair's use since the last Usage call.
type counter struct {
	asked, admitted int64
	count           int64         // the whole limit's Count when last seen
	period          time.Duration // and its Period
}

// Usage is what this process asked of its region's shares over one span:
// what [Store.Usage] returns, and what a gateway reports to the balancer.
type Usage struct {
	// Span is the time the counts cover.
	Span time.Duration
	// Total is how many tokens requests asked for, over every key.
	Total int64
	// Pairs are the counts of the busiest pairs, busiest first.
	Pairs []PairUsage
}

// PairUsage is one limit of one key's use over a Usage span.
type PairUsage struct {
	Pair
	// Asked is how many tokens requests asked for, admitted or not.
	Asked int64
	// Admitted is how many of them were admitted.
	Admitted int64
}

// record counts one call's tokens for each limit of req. Pairs beyond
// MaxTracked are counted only in the total, unless the table has a share
// for them.
func (s *Store) record(req *limit.Request, asked, admitted int64) {
	s.total.Add(asked)
	sh := s.shards.Of(req.Key)
	t := s.table.Load()
	sh.Lock()
	defer sh.Unlock()
	for i := range req.Limits {
		l := &req.Limits[i]
		if l.Shadow {
			continue // tried out, not enforced: no share to balance
		}
		p := Pair{req.Key, l.Name}
		c := sh.M[p]
		if c == nil {
			if len(sh.M) >= s.cfg.MaxTracked/usageShards+1 {
				if t == nil {
					continue
				}
				if _, ok := t.Shares[p]; !ok {
					continue
				}
			}
			c = &counter{}
			sh.M[p] = c
		}
		c.asked += asked
		c.admitted += admitted
		c.count, c.period = l.Count, l.Period
	}
}

// Usage returns the use counted since the last call (or since New) and
// starts a new span. Pairs holds the top busiest pairs, ranked by the part
// of their whole limit's rate they asked for, and besides those every pair
// the table in force has a share for, so the balancer keeps hearing about
// the keys it balances. Top ≤ 0 means only the table's pairs.
func (s *Store) Usage(top int) Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now().UnixNano()
	u := Usage{Span: time.Duration(now - s.since.Swap(now)), Total: s.total.Swap(0)}
	type ranked struct {
		PairUsage
		rank float64 // seconds of the whole limit's rate asked for
	}
	var all []ranked
	for i := range s.shards.Stripes() {
		sh := &s.shards.Stripes()[i]
		sh.Lock()
		m := sh.M
		sh.M = make(map[Pair]*counter, len(m))
		sh.Unlock()
		for p, c := range m {
			all = append(all, ranked{PairUsage{p, c.asked, c.admitted}, float64(c.asked) * c.period.Seconds() / float64(c.count)})
		}
	}
	slices.SortFunc(all, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.rank, a.rank), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Limit, b.Limit))
	})
	t := s.table.Load()
	for i, r := range all {
		inTable := false
		if t != nil {
			_, inTable = t.Shares[r.Pair]
		}
		if i < top || inTable {
			u.Pairs = append(u.Pairs, r.PairUsage)
		}
	}
	return u
}
