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
	// MaxSkew bounds how far ahead of the balancer's clock a report's
	// SentMillis may be: a report sent "later" than that is refused. Any
	// report counts as sent no later than it arrived, so that none can
	// make its gateway's reports to come look overtaken. Zero means 30
	// seconds.
	MaxSkew time.Duration
	// MaxGatewayRate bounds the tokens a second one gateway can plausibly
	// have been asked for, every key included: a report whose Total over
	// its span is above it is scaled down to it, pairs included. Zero
	// means DefaultMaxGatewayRate.
	MaxGatewayRate float64
	// MaxStateBytes bounds the reports the balancer keeps, as counted by
	// ReportBytes: when a report would take the state above it, the
	// pairs with the least demand (summed over every gateway) are dropped
	// from every report until the state is at most 3/4 of it (so that
	// a flood does not trim at every report). Zero means
	// DefaultMaxStateBytes.
	MaxStateBytes int64
}

// DefaultMaxGatewayRate is the default CoreConfig.MaxGatewayRate: 5000
// requests a second (the reference design's gateway) at a cost of 50.
const DefaultMaxGatewayRate = 250_000

// DefaultMaxStateBytes is the default CoreConfig.MaxStateBytes: 64 MiB.
const DefaultMaxStateBytes = 64 << 20

// The bytes ReportBytes counts besides the strings: a report's Go
// structures (its map entry, gateway record and Report), and one
// PairReport with the headers of its two strings and their allocation
// rounding.
const (
	reportOverhead = 256
	pairOverhead   = 64
)

// ReportBytes is what one report counts against CoreConfig.MaxStateBytes:
// 256 + len(Region) + len(Gateway) + the sum over its pairs of
// 64 + len(Key) + len(Limit).
func ReportBytes(r *Report) int64 {
	n := int64(reportOverhead + len(r.Region) + len(r.Gateway))
	for i := range r.Pairs {
		n += pairBytes(&r.Pairs[i])
	}
	return n
}

func pairBytes(p *PairReport) int64 { return int64(pairOverhead + len(p.Key) + len(p.Limit)) }

// Core decides shares from reports. It does no I/O and reads no clock:
// reports and the time come in, shares go out. It is not safe for
// concurrent use; Server serializes it.
type Core struct {
	cfg       CoreConfig
	index     map[string]int      // region → position in cfg.Regions
	gateways  map[string]*gateway // region + "/" + gateway ID → its last report
	perRegion []int               // gateways in gateways, by region
	last      *Plan               // the last plan, whose shares small moves keep
	bytes     int64               // ReportBytes of every report in gateways
}

// gateway is one gateway's last report.
type gateway struct {
	region int
	at     time.Time
	rep    Report
	bytes  int64 // ReportBytes(&rep)
}

// Reasons a report is refused or clamped: the values of RefusedError.Reason
// and Taken.Clamped, and of the balancer's metrics' reason label.
const (
	ReasonInvalid  = "invalid"  // refused: malformed (Report.Validate) or an unknown region
	ReasonClock    = "clock"    // refused: sent further ahead of the balancer's clock than MaxSkew
	ReasonGateways = "gateways" // refused: the region already has MaxGateways gateways
	ReasonRate     = "rate"     // clamped: more tokens a second than MaxGatewayRate
	ReasonPair     = "pair"     // clamped: a pair asked for more than the report's Total
)

// RefusedError is the error Report returns for a report it refuses.
type RefusedError struct {
	// Reason is one of the Reason constants.
	Reason string
	Err    error
}

// Error says why the report was refused.
func (e *RefusedError) Error() string { return e.Err.Error() }

// Unwrap returns the error that says why.
func (e *RefusedError) Unwrap() error { return e.Err }

func refused(reason string, format string, args ...any) error {
	return &RefusedError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Taken says what Report did with a report it did not refuse.
type Taken struct {
	// Overtaken is set when the report was dropped because its gateway's
	// report in hand was sent later.
	Overtaken bool
	// Clamped lists the bounds its counts were cut down to (ReasonRate,
	// ReasonPair), each once.
	Clamped []string
	// Evicted is how many pairs, of any report, were dropped to keep the
	// state within MaxStateBytes.
	Evicted int
}

// Config returns the Core's configuration, defaults filled in.
func (c *Core) Config() CoreConfig { return c.cfg }

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
	case cfg.MaxSkew < 0:
		return nil, fmt.Errorf("balancer: MaxSkew %v is negative", cfg.MaxSkew)
	case cfg.MaxGatewayRate < 0 || math.IsNaN(cfg.MaxGatewayRate):
		return nil, fmt.Errorf("balancer: MaxGatewayRate %v is not a rate", cfg.MaxGatewayRate)
	case cfg.MaxStateBytes < 0:
		return nil, fmt.Errorf("balancer: MaxStateBytes %d is negative", cfg.MaxStateBytes)
	}
	cfg.MaxSkew = cmp.Or(cfg.MaxSkew, 30*time.Second)
	cfg.MaxGatewayRate = cmp.Or(cfg.MaxGatewayRate, DefaultMaxGatewayRate)
	cfg.MaxStateBytes = cmp.Or(cfg.MaxStateBytes, DefaultMaxStateBytes)
	cfg.MaxGateways = cmp.Or(cfg.MaxGateways, 1024)
	cfg.MinShare = cmp.Or(cfg.MinShare, 50_000)
	cfg.DownAfter = cmp.Or(cfg.DownAfter, 30*time.Second)
	cfg.MaxKeys = cmp.Or(cfg.MaxKeys, 10000)
	cfg.Hysteresis = cmp.Or(cfg.Hysteresis, 10_000)
	return &Core{cfg: cfg, index: index, gateways: map[string]*gateway{}, perRegion: make([]int, len(cfg.Regions))}, nil
}

// Report records a gateway's report received at now, replacing that
// gateway's last (and no other gateway's). It refuses, with a
// *RefusedError, a malformed report, one from an unknown region or from one
// gateway too many, and one sent further ahead of now than MaxSkew. It
// clamps counts no gateway can have seen (see Taken), and drops a report
// sent before the one in hand.
func (c *Core) Report(now time.Time, r Report) (Taken, error) {
	var tk Taken
	i, ok := c.index[r.Region]
	if !ok {
		return tk, refused(ReasonInvalid, "report from %q: unknown region %q (want one of %v)", r.Gateway, r.Region, c.cfg.Regions)
	}
	if err := r.Validate(); err != nil {
		return tk, &RefusedError{Reason: ReasonInvalid, Err: err}
	}
	if ahead := time.Duration(r.SentMillis-now.UnixMilli()) * time.Millisecond; ahead > c.cfg.MaxSkew {
		return tk, refused(ReasonClock, "report from %q: sent at %d ms, %v ahead of the balancer's clock, more than the %v allowed",
			r.Gateway, r.SentMillis, ahead, c.cfg.MaxSkew)
	}
	// A report is ordered by when it was sent, but never later than when
	// it arrived: one stamped ahead (within MaxSkew) cannot make its
	// gateway's next real reports look overtaken.
	r.SentMillis = min(r.SentMillis, now.UnixMilli())
	id := r.Region + "/" + r.Gateway
	last := c.gateways[id]
	if last != nil && r.SentMillis != 0 && r.SentMillis < last.rep.SentMillis {
		tk.Overtaken = true // by a later report from the same gateway
		return tk, nil
	}
	if last == nil {
		if c.perRegion[i] >= c.cfg.MaxGateways {
			return tk, refused(ReasonGateways, "report from %q: region %q already has %d gateways reporting, the most kept (MaxGateways)",
				r.Gateway, r.Region, c.cfg.MaxGateways)
		}
		c.perRegion[i]++
	} else {
		c.bytes -= last.bytes
	}
	tk.Clamped = c.plausible(&r)
	g := &gateway{region: i, at: now, rep: r, bytes: ReportBytes(&r)}
	c.gateways[id] = g
	c.bytes += g.bytes
	tk.Evicted = c.trim()
	return tk, nil
}

// plausible cuts r's counts down to what one gateway can have seen: its
// Total to MaxGatewayRate over its span (its pairs in proportion), and
// each pair's counts to its Total (one request counts once in Total and
// once in each of its limits' pairs). It returns the bounds applied.
func (c *Core) plausible(r *Report) []string {
	var clamped []string
	cloned := false
	clone := func() {
		if !cloned {
			r.Pairs, cloned = slices.Clone(r.Pairs), true
		}
	}
	if most := c.cfg.MaxGatewayRate * float64(r.SpanMillis) / 1000; float64(r.Total) > most {
		f := most / float64(r.Total)
		r.Total = int64(most)
		clone()
		for j := range r.Pairs {
			p := &r.Pairs[j]
			p.Asked, p.Admitted = int64(float64(p.Asked)*f), int64(float64(p.Admitted)*f)
		}
		clamped = append(clamped, ReasonRate)
	}
	pair := false
	for j := range r.Pairs {
		if r.Pairs[j].Asked > r.Total {
			clone()
			p := &r.Pairs[j]
			p.Asked, p.Admitted, pair = r.Total, min(p.Admitted, r.Total), true
		}
	}
	if pair {
		clamped = append(clamped, ReasonPair)
	}
	return clamped
}

// StateBytes is the ReportBytes of every report the Core holds: at most
// MaxStateBytes.
func (c *Core) StateBytes() int64 { return c.bytes }

// trim drops the pairs with the least demand, summed over every gateway,
// from every report until the state is at most 3/4 of MaxStateBytes, if it
// is above MaxStateBytes. It returns how many pairs it dropped.
func (c *Core) trim() int {
	if c.bytes <= c.cfg.MaxStateBytes {
		return 0
	}
	t := c.pairTable()
	order := t.byDemand()
	excess := c.bytes - (c.cfg.MaxStateBytes - c.cfg.MaxStateBytes/4)
	drop := make([]bool, len(t.keys))
	// Whole runs of equal demand from the least; in the run that covers
	// the excess, the keys that sort last go first.
	for end := len(order); end > 0 && excess > 0; {
		start, _ := t.run(order, end-1)
		var run int64
		for _, i := range order[start:end] {
			run += t.bytes[i]
		}
		if run > excess {
			t.byKey(order[start:end])
		}
		for j := end - 1; j >= start && excess > 0; j-- {
			drop[order[j]] = true
			excess -= t.bytes[order[j]]
		}
		end = start
	}
	evicted, e := 0, 0
	for _, g := range t.gws {
		entries := t.idx[e : e+len(g.rep.Pairs)]
		e += len(g.rep.Pairs)
		n := 0
		for _, i := range entries {
			if !drop[i] {
				n++
			}
		}
		if n == len(entries) {
			continue
		}
		// A new slice, so that the dropped pairs' memory is freed.
		kept := make([]PairReport, 0, n)
		for j, i := range entries {
			if !drop[i] {
				kept = append(kept, g.rep.Pairs[j])
			}
		}
		evicted += len(entries) - n
		g.rep.Pairs = kept
		c.bytes -= g.bytes
		g.bytes = ReportBytes(&g.rep)
		c.bytes += g.bytes
	}
	return evicted
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
	p := &Plan{Regions: c.cfg.Regions, Up: make([]bool, n), Totals: make([]float64, n)}
	for id, g := range c.gateways {
		if now.Sub(g.at) > c.cfg.DownAfter {
			delete(c.gateways, id)
			c.perRegion[g.region]--
			c.bytes -= g.bytes
			continue
		}
		p.Up[g.region] = true
		p.Totals[g.region] += float64(g.rep.Total) / (float64(g.rep.SpanMillis) / 1000)
	}
	if !slices.Contains(p.Up, true) {
		return nil
	}
	t := c.pairTable()
	order := t.byDemand()
	if len(order) > c.cfg.MaxKeys {
		// The busiest MaxKeys; among equals at the cut, by key.
		start, end := t.run(order, c.cfg.MaxKeys)
		t.byKey(order[start:end])
		order = order[:c.cfg.MaxKeys]
	}
	p.Pairs = make(map[share.Pair]*PairPlan, len(order))
	demand := make([]float64, len(order)*n) // one allocation for every kept pair's
	for j, i := range order {
		d := demand[j*n : (j+1)*n : (j+1)*n]
		copy(d, t.demand[int(i)*n:])
		p.Pairs[t.keys[i]] = &PairPlan{Demand: d}
	}
	last := cmp.Or(c.last, &Plan{}) // no shares to keep the first time
	p.Defaults = c.steady(Split(p.Totals, p.Up, c.cfg.MinShare), last.Defaults)
	for k, pp := range p.Pairs {
		var old []uint32
		if lp := last.Pairs[k]; lp != nil {
			old = lp.Shares
		}
		pp.Shares = c.steady(Split(pp.Demand, p.Up, c.cfg.MinShare), old)
	}
	c.last = p
	return p
}

// pairTable is every pair of the reports kept, each once: what Rebalance
// and trim rank. It is built without an allocation per pair, so that a
// state at its bound (some 200000 pairs) costs little more than its size.
type pairTable struct {
	gws    []*gateway   // the reports, in the order of idx
	idx    []int32      // each report's pairs' indices in keys, report after report
	n      int          // regions
	keys   []share.Pair // the pairs
	demand []float64    // n per pair: tokens a second each region asked for
	total  []float64    // per pair: the sum of its demand
	bytes  []int64      // per pair: what its entries in every report count in ReportBytes
}

func (c *Core) pairTable() *pairTable {
	t := &pairTable{n: len(c.cfg.Regions)}
	// First each entry's pair index, hashing each key once; then the sums,
	// in slices of their final size.
	gws := make([]*gateway, 0, len(c.gateways)) // one order for both passes
	entries, widest := 0, 0                     // pairs in all reports, in the longest: at least the distinct ones
	for _, g := range c.gateways {
		gws = append(gws, g)
		entries += len(g.rep.Pairs)
		widest = max(widest, len(g.rep.Pairs))
	}
	at := make(map[share.Pair]int32, widest)
	idx := make([]int32, 0, entries)
	t.keys = make([]share.Pair, 0, widest)
	for _, g := range gws {
		for j := range g.rep.Pairs {
			k := share.Pair{Key: g.rep.Pairs[j].Key, Limit: g.rep.Pairs[j].Limit}
			i, ok := at[k]
			if !ok {
				i = int32(len(t.keys))
				at[k] = i
				t.keys = append(t.keys, k)
			}
			idx = append(idx, i)
		}
	}
	t.gws, t.idx = gws, idx
	t.demand, t.total, t.bytes = make([]float64, len(t.keys)*t.n), make([]float64, len(t.keys)), make([]int64, len(t.keys))
	e := 0
	for _, g := range gws {
		secs := float64(g.rep.SpanMillis) / 1000
		for j := range g.rep.Pairs {
			r, i := &g.rep.Pairs[j], idx[e]
			e++
			d := float64(r.Asked) / secs
			t.demand[int(i)*t.n+g.region] += d
			t.total[i] += d
			t.bytes[i] += pairBytes(r)
		}
	}
	return t
}

// byDemand returns the indices of t's pairs, the most demand first. Each
// pair's demand is summed once, not in the comparator, and keys are not
// compared: the sort runs under the server's mutex. Within a run of equal
// demand the order is arbitrary until byKey orders the run.
func (t *pairTable) byDemand() []int32 {
	order := make([]int32, len(t.keys))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(t.total[b], t.total[a]) })
	return order
}

// run returns the bounds [start, end) of the run of equal demand in order
// around position at.
func (t *pairTable) run(order []int32, at int) (start, end int) {
	d := t.total[order[at]]
	start, end = at, at+1
	for start > 0 && t.total[order[start-1]] == d {
		start--
	}
	for end < len(order) && t.total[order[end]] == d {
		end++
	}
	return start, end
}

// byKey sorts pairs by key and limit, so that a cut through a run of equal
// demand does not depend on the map's order.
func (t *pairTable) byKey(pairs []int32) {
	slices.SortFunc(pairs, func(a, b int32) int {
		return cmp.Or(cmp.Compare(t.keys[a].Key, t.keys[b].Key), cmp.Compare(t.keys[a].Limit, t.keys[b].Limit))
	})
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

// Split divides a whole limit (share.Whole) between regions in proportion
// to their weights: every region that is up gets at least minShare (or an
// even split, when the regions up cannot all have it), the rest goes to
// them in proportion to their weights, and regions that are down get
// nothing. With no weight at all, the regions up split evenly. Shares round
// down, so they add up to at most share.Whole.
func Split(weights []float64, up []bool, minShare uint32) []uint32 {
	out := make([]uint32, len(weights))
	nUp := count(up[:len(weights)])
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
