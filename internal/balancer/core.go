package balancer

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluice-rl/sluice/share"
)

// CoreConfig configures a Core. Regions is required; the zero value of
// every other field means its default.
type CoreConfig struct {
	// Regions names every region that shares the limits.
	Regions []string
	// MinShare is the least share of a limit a region that is up gets, in
	// parts per million: room to absorb a sudden shift of traffic until the
	// next rebalance. Zero means 50000 (5%). It is cut to an even split
	// when the regions up cannot all have it.
	MinShare uint32
	// DownAfter is how long a region may go without a report before it
	// counts as down: its shares go to the regions that are up. Zero means
	// 30 seconds.
	DownAfter time.Duration
	// MaxKeys bounds how many limits of keys are balanced; the ones with
	// the most traffic are kept. Zero means 10000.
	MaxKeys int
	// Hysteresis is how far, in parts per million, some region's share of
	// a limit must move before the limit's shares change at all: demand is
	// noisy, and every change of a region's rate starts new token leases
	// there, dropping the tokens leased under the old one. Zero means
	// 10000 (1%).
	Hysteresis uint32
	// MaxGateways bounds how many gateways of one region the balancer
	// keeps reports of; a report from one more is refused until one of
	// them has been silent for DownAfter. Zero means 1024.
	MaxGateways int
}

// Core decides shares from reports. It does no I/O and reads no clock:
// reports and the time come in, shares go out. It is not safe for
// concurrent use; Server serializes it.
type Core struct {
	cfg       CoreConfig
	index     map[string]int      // region → position in cfg.Regions
	gateways  map[string]*gateway // region + "/" + gateway ID → its last report
	perRegion []int               // gateways in gateways, by region
	last      *Plan               // the last plan, whose shares small moves keep
}

// gateway is one gateway's last report.
type gateway struct {
	region int
	at     time.Time
	rep    Report
}

// NewCore returns a Core for cfg.
func NewCore(cfg CoreConfig) (*Core, error) {
	if len(cfg.Regions) == 0 {
		return nil, errors.New("balancer: no regions")
	}
	index := map[string]int{}
	for i, r := range cfg.Regions {
		if r == "" {
			return nil, errors.New("balancer: a region name is empty")
		}
		if _, dup := index[r]; dup {
			return nil, fmt.Errorf("balancer: region %q is named twice", r)
		}
		index[r] = i
	}
	switch {
	case cfg.MinShare > share.Whole:
		return nil, fmt.Errorf("balancer: minimum share %d is above the whole %d", cfg.MinShare, share.Whole)
	case cfg.DownAfter < 0:
		return nil, fmt.Errorf("balancer: down-after %v is negative", cfg.DownAfter)
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("balancer: MaxKeys %d is negative", cfg.MaxKeys)
	case cfg.MaxGateways < 0:
		return nil, fmt.Errorf("balancer: MaxGateways %d is negative", cfg.MaxGateways)
	}
	if cfg.MaxGateways == 0 {
		cfg.MaxGateways = 1024
	}
	if cfg.MinShare == 0 {
		cfg.MinShare = 50_000
	}
	if cfg.DownAfter == 0 {
		cfg.DownAfter = 30 * time.Second
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 10000
	}
	if cfg.Hysteresis == 0 {
		cfg.Hysteresis = 10_000
	}
	return &Core{cfg: cfg, index: index, gateways: map[string]*gateway{}, perRegion: make([]int, len(cfg.Regions))}, nil
}

// Report records a gateway's report received at now, replacing its last.
func (c *Core) Report(now time.Time, r Report) error {
	i, ok := c.index[r.Region]
	if !ok {
		return fmt.Errorf("report from %q: unknown region %q (want one of %v)", r.Gateway, r.Region, c.cfg.Regions)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	id := r.Region + "/" + r.Gateway
	last := c.gateways[id]
	if last != nil && r.SentMillis != 0 && r.SentMillis < last.rep.SentMillis {
		return nil // overtaken by a later report from the same gateway
	}
	if last == nil {
		if c.perRegion[i] >= c.cfg.MaxGateways {
			return fmt.Errorf("report from %q: region %q already has %d gateways reporting, the most kept (MaxGateways)",
				r.Gateway, r.Region, c.cfg.MaxGateways)
		}
		c.perRegion[i]++
	}
	c.gateways[id] = &gateway{region: i, at: now, rep: r}
	return nil
}

// Plan is the shares of every region at one rebalance. Shares are in parts
// per million, indexed like CoreConfig.Regions.
type Plan struct {
	// Regions are the region names, as configured.
	Regions []string
	// Up says which regions reported within DownAfter.
	Up []bool
	// Defaults are each region's share of limits not in Pairs: in
	// proportion to the regions' whole traffic.
	Defaults []uint32
	// Totals are the tokens per second each region asked for, every key.
	Totals []float64
	// Pairs are the busy limits of keys and each region's share of them.
	Pairs map[share.Pair]*PairPlan
}

// PairPlan is every region's share of one limit of one key.
type PairPlan struct {
	Shares []uint32
	// Demand is the tokens per second each region asked for.
	Demand []float64
}

// Rebalance returns the shares for now, from the reports no older than
// DownAfter, and forgets older ones. It returns nil when no region is up:
// then there is nothing to base shares on, and gateways keep theirs.
func (c *Core) Rebalance(now time.Time) *Plan {
	n := len(c.cfg.Regions)
	p := &Plan{Regions: c.cfg.Regions, Up: make([]bool, n), Totals: make([]float64, n), Pairs: map[share.Pair]*PairPlan{}}
	for id, g := range c.gateways {
		if now.Sub(g.at) > c.cfg.DownAfter {
			delete(c.gateways, id)
			c.perRegion[g.region]--
			continue
		}
		p.Up[g.region] = true
		secs := float64(g.rep.SpanMillis) / 1000
		p.Totals[g.region] += float64(g.rep.Total) / secs
		for _, r := range g.rep.Pairs {
			k := share.Pair{Key: r.Key, Limit: r.Limit}
			pp := p.Pairs[k]
			if pp == nil {
				pp = &PairPlan{Demand: make([]float64, n)}
				p.Pairs[k] = pp
			}
			pp.Demand[g.region] += float64(r.Asked) / secs
		}
	}
	if !slices.Contains(p.Up, true) {
		return nil
	}
	if len(p.Pairs) > c.cfg.MaxKeys {
		// Each pair's demand is summed once, not in the comparator: the
		// sort runs under the server's mutex.
		type ranked struct {
			share.Pair
			demand float64
		}
		keys := make([]ranked, 0, len(p.Pairs))
		for k, pp := range p.Pairs {
			var d float64
			for _, v := range pp.Demand {
				d += v
			}
			keys = append(keys, ranked{k, d})
		}
		slices.SortFunc(keys, func(a, b ranked) int {
			return cmp.Or(cmp.Compare(b.demand, a.demand), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Limit, b.Limit))
		})
		for _, k := range keys[c.cfg.MaxKeys:] {
			delete(p.Pairs, k.Pair)
		}
	}
	p.Defaults = c.steady(Split(p.Totals, p.Up, c.cfg.MinShare), c.lastDefaults())
	for k, pp := range p.Pairs {
		pp.Shares = c.steady(Split(pp.Demand, p.Up, c.cfg.MinShare), c.lastShares(k))
	}
	c.last = p
	return p
}

// steady returns old when no region's share moved by Hysteresis or more
// from it, else next. Either adds up to at most the whole: a limit's shares
// are kept or replaced together, never mixed.
func (c *Core) steady(next, old []uint32) []uint32 {
	if old == nil {
		return next
	}
	for i := range next {
		d := int64(next[i]) - int64(old[i])
		// A region that went down or came back always changes.
		if d >= int64(c.cfg.Hysteresis) || -d >= int64(c.cfg.Hysteresis) || (next[i] == 0) != (old[i] == 0) {
			return next
		}
	}
	return old
}

func (c *Core) lastDefaults() []uint32 {
	if c.last == nil {
		return nil
	}
	return c.last.Defaults
}

func (c *Core) lastShares(k share.Pair) []uint32 {
	if c.last == nil || c.last.Pairs[k] == nil {
		return nil
	}
	return c.last.Pairs[k].Shares
}

// Split divides a whole limit (share.Whole) between regions in proportion
// to their weights: every region that is up gets at least minShare (or an
// even split, when the regions up cannot all have it), the rest goes to
// them in proportion to their weights, and regions that are down get
// nothing. With no weight at all, the regions up split evenly. Shares round
// down, so they add up to at most share.Whole.
func Split(weights []float64, up []bool, minShare uint32) []uint32 {
	out := make([]uint32, len(weights))
	nUp := 0
	for i := range weights {
		if up[i] {
			nUp++
		}
	}
	if nUp == 0 {
		return out
	}
	m := min(uint64(minShare), share.Whole/uint64(nUp))
	weights = slices.Clone(weights)
	for i, w := range weights {
		if !(w > 0) || math.IsInf(w, 1) { // negative, zero or NaN: no traffic
			weights[i] = 0
		}
		if math.IsInf(w, 1) {
			weights[i] = math.MaxFloat64 / float64(len(weights)+1)
		}
	}
	// Regions whose proportional share would fall below the minimum are
	// held at it; the others split what is left, until none falls below.
	atMin := make([]bool, len(weights))
	for {
		rest := float64(share.Whole)
		var w float64
		for i := range weights {
			switch {
			case !up[i]:
			case atMin[i]:
				rest -= float64(m)
			default:
				w += weights[i]
			}
		}
		changed := false
		for i := range weights {
			if !up[i] || atMin[i] {
				continue
			}
			var s float64
			if w > 0 {
				s = rest * (weights[i] / w)
			} else {
				s = rest / float64(nUp-count(atMin))
			}
			if s < float64(m) {
				atMin[i], changed = true, true
				break
			}
			out[i] = uint32(s)
		}
		if !changed {
			break
		}
	}
	var sum uint64
	for i := range weights {
		if up[i] && atMin[i] {
			out[i] = uint32(m)
		}
		sum += uint64(out[i])
	}
	// Floating point may round a proportional share up by one part; take
	// any excess from the largest share.
	if sum > share.Whole {
		out[slices.Index(out, slices.Max(out))] -= uint32(sum - share.Whole)
	}
	return out
}

func count(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}
