// Package share enforces one region's share of global limits: a layer over
// any limit.Store that cuts each limit of a request down to the share the
// quota balancer gave this region, before the region's own store (its Redis)
// counts it.
//
// The API runs in several regions, each deciding on its own store, while a
// customer's limit is global. The balancer (sluice balancer) hands each
// region a share of every busy key's limit, in proportion to where the key's
// traffic is, with shares of one limit adding up to at most the whole; keys
// it has no share for get the table's default share of this region. A
// [Store] applies the current [Table], swapped in whole with [Store.Set],
// and counts what each key asks for so that [Store.Usage] can tell the
// balancer where traffic is.
//
// Before the first table every key gets an even split between
// Config.Regions; a table the balancer has not confirmed for Config.Stale
// (5 minutes) gives each key the even split or its share in the table,
// whichever is smaller (Store.lookup says why).
package share

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/striped"
	"github.com/sluice-rl/sluice/limit"
)

// Whole is a whole limit in the unit shares are counted in: parts per
// million. Shares that add up to at most Whole scale (rounded down) to
// limits that add up to at most the limit.
const Whole = 1_000_000

// Pair names one limit of one key: the unit shares are given in.
type Pair struct {
	// Key is the store key (limit.Request.Key), such as "k:abc".
	Key string
	// Limit is the limit's name (limit.Limit.Name), such as "s".
	Limit string
}

// Table is one version of this region's shares, in parts per million of
// each limit ([Whole]). A Table given to [Store.Set] must not be modified
// afterwards.
type Table struct {
	// Version orders tables; the balancer raises it with every change.
	Version int64
	// Default is this region's share of every limit not in Shares.
	Default uint32
	// Shares are this region's shares of the busy keys' limits.
	Shares map[Pair]uint32
}

// Validate reports whether every share of t is at most Whole.
func (t *Table) Validate() error {
	if t.Default > Whole {
		return fmt.Errorf("share: default share %d is above the whole %d", t.Default, Whole)
	}
	for p, s := range t.Shares {
		if s > Whole {
			return fmt.Errorf("share: share %d of key %q limit %q is above the whole %d", s, p.Key, p.Limit, Whole)
		}
	}
	return nil
}

// Config configures a Store. Regions is required; the zero value of every
// other field means its default.
type Config struct {
	// Regions is how many regions share each limit: before the first table
	// each gets an even split, Whole / Regions.
	Regions int
	// Stale is how long a table stays in force without the balancer
	// confirming it (see the package doc). Zero means 5 minutes.
	Stale time.Duration
	// Interval is how often the balancer rebalances. A request that the
	// whole limit could admit but this region's share never can is
	// refused for Interval (or the limit's period, if shorter) rather
	// than as limit.Never: the next table may give the region more. Zero
	// means 10 seconds.
	Interval time.Duration
	// MaxTracked bounds how many pairs Usage counts per interval beyond the
	// table's own. Zero means 10000.
	MaxTracked int
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Logger receives the switch to and from stale shares. Nil discards.
	Logger *slog.Logger
	// Registerer receives the share metrics. Nil registers none.
	Registerer prometheus.Registerer
	// GiveBack is where Store.GiveBack returns a take's grants: the store
	// at the bottom of the stack the region's takes reach (a pipeline's
	// redisstore.Store). Nil means the inner store, when it is a
	// GiveBacker.
	GiveBack GiveBacker
}

// GiveBacker returns a take's grants to every limit of a request, never
// above a limit's burst: redisstore.Store and memstore.Store are ones.
type GiveBacker interface {
	GiveBack(ctx context.Context, req *limit.Request) error
}

// DefaultStale is how long shares stay in force without the balancer.
const DefaultStale = 5 * time.Minute

// Store is a limit.Store that cuts each limit down to this region's share
// before the inner store counts it. Make one with New; the zero value is
// not usable. It is safe for concurrent use. It starts no goroutines; the
// caller owns the inner store and closes it.
type Store struct {
	inner limit.Store
	cfg   Config
	even  uint32

	table   atomic.Pointer[Table]
	contact atomic.Int64 // Unix nanoseconds of the last Set or Touch; 0: never
	stale   atomic.Bool  // whether the last check found the table stale

	// shards holds the usage counters, striped by key.
	shards *striped.Map[Pair, *counter]
	total  atomic.Int64 // tokens asked for since the last Usage, every key
	since  atomic.Int64 // Unix nanoseconds of the last Usage (or of New)
	born   int64        // Unix nanoseconds of New
	mu     sync.Mutex   // serializes Usage
}

var (
	_ limit.Store   = (*Store)(nil)
	_ limit.Granter = (*Granter)(nil)
)

// New returns a Store over inner.
func New(inner limit.Store, cfg Config) (*Store, error) {
	switch {
	case inner == nil:
		return nil, errors.New("share: inner store is nil")
	case cfg.Regions < 1:
		return nil, fmt.Errorf("share: %d regions: want at least 1", cfg.Regions)
	case cfg.Stale < 0:
		return nil, fmt.Errorf("share: stale timeout %v is negative", cfg.Stale)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("share: interval %v is negative", cfg.Interval)
	case cfg.MaxTracked < 0:
		return nil, fmt.Errorf("share: MaxTracked %d is negative", cfg.MaxTracked)
	}
	cfg.Stale = cmp.Or(cfg.Stale, DefaultStale)
	cfg.Interval = cmp.Or(cfg.Interval, 10*time.Second)
	cfg.MaxTracked = cmp.Or(cfg.MaxTracked, 10000)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if g, ok := inner.(GiveBacker); ok && cfg.GiveBack == nil {
		cfg.GiveBack = g
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Store{inner: inner, cfg: cfg, even: uint32(Whole / cfg.Regions),
		shards: striped.New[Pair, *counter](usageShards)}
	s.born = cfg.Now().UnixNano()
	s.since.Store(s.born)
	if cfg.Registerer != nil {
		if err := registerMetrics(s, cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Set swaps t in as the table in force, whole: a request sees the old table
// or the new one, never a mix. It counts as contact with the balancer.
func (s *Store) Set(t *Table) error {
	if t == nil {
		return errors.New("share: table is nil")
	}
	if err := t.Validate(); err != nil {
		return err
	}
	s.table.Store(t)
	s.Touch()
	return nil
}

// Touch records that the balancer confirmed the table in force.
func (s *Store) Touch() { s.contact.Store(s.cfg.Now().UnixNano()) }

// Current returns the table in force, or nil before the first.
func (s *Store) Current() *Table { return s.table.Load() }

// Age reports how long ago the balancer last set or confirmed the table;
// before the first table, how long ago the Store was made.
func (s *Store) Age() time.Duration {
	return s.cfg.Now().Sub(time.Unix(0, cmp.Or(s.contact.Load(), s.born)))
}

// Stale reports whether the table has gone unconfirmed past Config.Stale.
// It is false before the first table, when the even split applies.
func (s *Store) Stale() bool {
	return s.table.Load() != nil && s.Age() > s.cfg.Stale
}

// Share returns the share this region enforces now for one limit of a key.
func (s *Store) Share(key, limitName string) uint32 {
	return s.lookup(s.view(), Pair{key, limitName})
}

// view is the table to read for one request, with whether its per-key
// shares are in force.
type view struct {
	t     *Table
	fresh bool
}

func (s *Store) view() view {
	t := s.table.Load()
	if t == nil {
		return view{}
	}
	stale := s.cfg.Now().UnixNano()-s.contact.Load() > int64(s.cfg.Stale)
	if stale != s.stale.Load() && s.stale.CompareAndSwap(!stale, stale) {
		if stale {
			s.cfg.Logger.Warn("region shares are stale: the balancer has not answered; every key gets at most an even split",
				"age_ms", s.Age().Milliseconds(), "even", float64(s.even)/Whole, "default", float64(t.Default)/Whole, "version", t.Version)
		} else {
			s.cfg.Logger.Info("region shares are fresh again", "version", t.Version)
		}
	}
	return view{t, !stale}
}

func (s *Store) lookup(v view, p Pair) uint32 {
	if v.t == nil {
		return s.even
	}
	sh, ok := v.t.Shares[p]
	switch {
	case v.fresh && ok:
		return sh
	case v.fresh:
		return v.t.Default
	case v.t.Default == 0:
		// Only a table made while this region was counted down has no
		// default share (a region that is up gets at least the minimum):
		// it says nothing of where traffic is, and going stale on it
		// would refuse everything. Fall back to the even split, as
		// before the first table.
		return s.even
	case !ok:
		sh = v.t.Default
	}
	// Stale: the fixed even split, but never more than the share in the
	// last table. Other regions may still run the same table fresh, or
	// have gone stale already; either way each region's share is at most
	// its share in one table, whose shares add up to at most the whole.
	// And a region cut off from the balancer while the others go on adds
	// at most the even split to the whole they share between them.
	return min(sh, s.even)
}

// Take scales req's limits to this region's shares (limit.Limit.Scale,
// rounded down, so that the regions' shares of a limit never add up to
// more than it) and passes it to the inner store, whose Decision it
// returns. req must be valid (limit.Store). A limit whose share rounds to
// nothing refuses at once, for its period, from limit.FromRegionShare.
func (s *Store) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	scaled, refused, ok := s.scale(req)
	if !ok {
		return refused, nil
	}
	d, err := s.inner.Take(ctx, scaled)
	admitted := int64(0)
	if d.Allowed {
		admitted = req.EffectiveCost()
	}
	return s.took(req, admitted, d, err), err
}

// took counts the inner store's answer to req, n tokens admitted (unless
// it failed), and returns its decision as passable makes it.
func (s *Store) took(req *limit.Request, n int64, d limit.Decision, err error) limit.Decision {
	if err == nil {
		s.record(req, max(n, req.EffectiveCost()), n)
	}
	return s.passable(req, d)
}

// GiveBack returns req's cost to every limit of req scaled as Take scales
// it, so that the cost reaches the bucket the take drew from and no bucket
// is lifted above the region's share of its burst; a limit whose share
// rounds to nothing, which a take would not have drawn from, is left out.
// It goes to Config.GiveBack (or the inner store). Usage is not changed.
func (s *Store) GiveBack(ctx context.Context, req *limit.Request) error {
	if s.cfg.GiveBack == nil {
		return errors.New("share: nothing to give back to: the inner store is not a GiveBacker and Config.GiveBack is nil")
	}
	v := s.view()
	out := &limit.Request{Key: req.Key, Cost: req.Cost, Limits: make([]limit.Limit, 0, len(req.Limits))}
	for i := range req.Limits {
		if sl, ok := s.scaleOne(v, req.Key, &req.Limits[i]); ok {
			out.Limits = append(out.Limits, sl)
		}
	}
	if len(out.Limits) == 0 {
		return nil
	}
	return s.cfg.GiveBack.GiveBack(ctx, out)
}

// passable turns the inner store's limit.Never (the cost is above the
// scaled burst) into a refusal for one rebalance interval, or the limit's
// period if shorter, when the cost fits the whole limit's burst: it can
// pass after a rebalance, and a caller told Never would refuse it for good
// (the lease layer caches such refusals).
func (s *Store) passable(req *limit.Request, d limit.Decision) limit.Decision {
	if d.Allowed || d.RetryAfter != limit.Never || d.Index < 0 || d.Index >= len(req.Limits) {
		return d
	}
	l := &req.Limits[d.Index]
	if req.EffectiveCost() > l.EffectiveBurst() {
		return d
	}
	wait := min(s.cfg.Interval, l.Period)
	d.RetryAfter, d.ResetAfter, d.Source = wait, max(d.ResetAfter, wait), limit.FromRegionShare
	return d
}

// scale returns req with every limit scaled to its share. When a share is
// too small to admit anything it counts req as refused and returns the
// refusal to answer instead.
func (s *Store) scale(req *limit.Request) (*limit.Request, limit.Decision, bool) {
	v := s.view()
	out := &limit.Request{Key: req.Key, Cost: req.Cost, Limits: make([]limit.Limit, len(req.Limits))}
	for i := range req.Limits {
		l := &req.Limits[i]
		sl, ok := s.scaleOne(v, req.Key, l)
		if !ok {
			s.record(req, req.EffectiveCost(), 0)
			return nil, limit.Decision{Index: i, RetryAfter: l.Period, ResetAfter: l.Period, Source: limit.FromRegionShare}, false
		}
		out.Limits[i] = sl
	}
	return out, limit.Decision{}, true
}

// scaleOne scales limit l of key to its share in v, rounding down; false
// when the share rounds to nothing. A shadow limit then stays whole: it
// never refuses.
func (s *Store) scaleOne(v view, key string, l *limit.Limit) (limit.Limit, bool) {
	sl, ok := l.Scale(limit.Fraction{Num: int64(s.lookup(v, Pair{key, l.Name})), Den: Whole}, limit.RoundDown)
	if !ok && l.Shadow {
		return *l, true
	}
	return sl, ok
}

// Granter is a Store over a limit.Granter: it also takes batches of a
// region's share, for token leases above it.
type Granter struct {
	*Store
	inner limit.Granter
}

// NewGranter returns a Granter over inner.
func NewGranter(inner limit.Granter, cfg Config) (*Granter, error) {
	s, err := New(inner, cfg)
	if err != nil {
		return nil, err
	}
	return &Granter{Store: s, inner: inner}, nil
}

// TakeUpTo scales req's limits to this region's shares and takes up to want
// tokens of them from the inner store.
func (g *Granter) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	scaled, refused, ok := g.scale(req)
	if !ok {
		return 0, refused, nil
	}
	n, d, err := g.inner.TakeUpTo(ctx, scaled, want)
	return n, g.took(req, n, d, err), err
}
