package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Adder adds counts to the shared counters and answers their totals,
// parallel to adds: redisstore.Store through a small adapter, or Memory.
type Adder interface {
	AddCounts(ctx context.Context, adds []Add) ([]int64, error)
}

// Config configures a Batcher. The zero value gives the defaults.
type Config struct {
	// Interval is how often the gateway's counts are added to the shared
	// counters. Zero means 2s. The over-bound grows with it (package doc).
	Interval time.Duration
	// Fleet is how many gateways share the quotas. The zero value is a
	// fleet of one.
	Fleet limit.Fleet
	// Now reads the clock. Nil means time.Now.
	Now func() time.Time
	// Timeout bounds one flush or one read of an unknown counter. Zero
	// means 1s.
	Timeout time.Duration
	// Logger receives failed flushes. Nil discards.
	Logger *slog.Logger
}

// Batcher counts quotas in batches against an Adder: a Counter, and the
// goroutine that flushes it every Interval. It is safe for concurrent use;
// Close stops the goroutine and flushes what is owed.
type Batcher struct {
	core    *Counter
	adder   Adder
	cfg     Config
	stop    chan struct{}
	done    chan struct{}
	closing sync.Once
	// flushMu serialises flushes, so that a total settled late never
	// overwrites a newer one.
	flushMu sync.Mutex
}

// New starts a Batcher over adder.
func New(adder Adder, cfg Config) (*Batcher, error) {
	if adder == nil {
		return nil, errors.New("quota: no Adder")
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("quota: interval %v and timeout %v must not be negative", cfg.Interval, cfg.Timeout)
	}
	if err := cfg.Fleet.Validate(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	cfg.Interval = cmp.Or(cfg.Interval, 2*time.Second)
	cfg.Timeout = cmp.Or(cfg.Timeout, time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	b := &Batcher{core: NewCounter(cfg.Fleet.Size), adder: adder, cfg: cfg,
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b, nil
}

func (b *Batcher) run() {
	defer close(b.done)
	t := time.NewTicker(b.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeout)
			if err := b.Flush(ctx); err != nil {
				b.cfg.Logger.Warn("quota counts not added; owed until the next flush", "err", err)
			}
			cancel()
		}
	}
}

// Take decides a request of cost tokens of key against quotas. A counter
// this process has not heard of in the current period is read first, in
// one call, so a gateway that starts late in the day knows what is used;
// when that read fails, the counter is counted at this gateway's share of
// the quota until a flush reaches the store. The error is not nil only
// when a period ended twice during the call.
func (b *Batcher) Take(ctx context.Context, key string, quotas []Quota, cost int64) (Decision, error) {
	for range 2 {
		now := b.cfg.Now()
		d := b.core.Take(now, key, quotas, cost)
		if !d.Unknown {
			return d, nil
		}
		var adds []Add
		for i := range quotas {
			id, _, end := quotas[i].Window(now)
			adds = append(adds, Add{Key: quotas[i].keyOf(key), Counter: quotas[i].CounterName(id), ExpireAt: end.Add(Grace)})
		}
		ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		totals, err := b.adder.AddCounts(ctx, adds)
		cancel()
		b.core.Settle(adds, totals, err)
		if err != nil {
			// Counted at this gateway's share from now on (Counter.Settle),
			// so an outage costs one timeout per key, not one a request.
			b.cfg.Logger.Warn("quota counters not read; counting this gateway's share until Redis answers", "err", err)
		}
	}
	return Decision{}, fmt.Errorf("quota: %s's counters changed period twice while read", key)
}

// Flush adds every count owed to the shared counters now, in one call.
func (b *Batcher) Flush(ctx context.Context) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	adds := b.core.Pending(b.cfg.Now())
	if len(adds) == 0 {
		return nil
	}
	totals, err := b.adder.AddCounts(ctx, adds)
	if err == nil && len(totals) != len(adds) {
		err = fmt.Errorf("quota: %d totals for %d counters", len(totals), len(adds))
	}
	b.core.Settle(adds, totals, err)
	return err
}

// Close stops the flushing goroutine and flushes what is owed, bounded by
// Timeout. It is idempotent.
func (b *Batcher) Close() {
	b.closing.Do(func() {
		close(b.stop)
		<-b.done
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeout)
		defer cancel()
		if err := b.Flush(ctx); err != nil {
			b.cfg.Logger.Warn("quota counts lost at close", "err", err)
		}
	})
}

// Memory is an in-process Adder: the shared counters of a single process
// (the in-process pipeline), or of tests. A counter is dropped after its
// Add's ExpireAt, read on Now. The zero value is ready, reading time.Now;
// it is safe for concurrent use.
type Memory struct {
	// Now reads the clock for expiry. Nil means time.Now.
	Now func() time.Time

	mu     sync.Mutex
	counts map[[2]string]memCount // guarded by mu
	adds   int                    // guarded by mu: since the last sweep
}

// memCount is one Memory counter.
type memCount struct {
	n      int64
	expire time.Time // zero: never
}

// AddCounts implements Adder.
func (m *Memory) AddCounts(_ context.Context, adds []Add) ([]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[[2]string]memCount{}
	}
	if m.adds += len(adds); m.adds >= 1024 {
		// Sweep now and then, so that a long-running process keeps only
		// the counters of current periods.
		m.adds = 0
		now := time.Now()
		if m.Now != nil {
			now = m.Now()
		}
		maps.DeleteFunc(m.counts, func(_ [2]string, c memCount) bool { return !c.expire.IsZero() && now.After(c.expire) })
	}
	out := make([]int64, len(adds))
	for i, a := range adds {
		k := [2]string{a.Key, a.Counter}
		c := m.counts[k]
		c.n += a.Delta
		if !a.ExpireAt.IsZero() {
			c.expire = a.ExpireAt
		}
		m.counts[k] = c
		out[i] = c.n
	}
	return out, nil
}
