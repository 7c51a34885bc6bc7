package pipeline

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// The census: a gateway told neither its fleet size (Config.Fleet.Gateways)
// nor how to learn it (Config.Fleet.Count) counts the gateways that share
// its Redis.
// Each one takes a token from one shared sliding log every censusEvery;
// the log keeps censusTicks periods, so it holds censusTicks entries per
// live gateway, and a gateway that stops is gone from it after that. The
// count is read from the log's own answer (Decision.Remaining), so the
// census costs one script call per gateway per censusEvery and no other
// Redis command.
const (
	censusKey   = "sluice:fleet" // no caller's key has this prefix (k:, ip:, shadow:, rls:)
	censusEvery = time.Second
	censusTicks = 3
)

// censusLimit is the log every gateway writes to: room for the entries of
// limit.MaxLogCount / censusTicks gateways.
var censusLimit = limit.Limit{Name: "gateways", Count: limit.MaxLogCount, Period: censusTicks * censusEvery, Algorithm: limit.SlidingLog}

// census counts the gateways that share a Redis. Its goroutine belongs to
// the Pipeline, whose Close stops it.
type census struct {
	store limit.Store
	log   *slog.Logger
	size  atomic.Int64 // the last count; 0 until Redis has answered
	stop  context.CancelFunc
	done  chan struct{}
}

// startCensus counts once now, bounded by ctx, and then every censusEvery
// until Close.
func startCensus(ctx context.Context, store limit.Store, log *slog.Logger) *census {
	c := &census{store: store, log: log, done: make(chan struct{})}
	c.count(ctx)
	bg, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.run(bg)
	return c
}

func (c *census) run(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(censusEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.count(ctx)
		}
	}
}

// count writes this gateway's entry and reads the fleet from the answer:
// the live entries, censusTicks per gateway, rounded. A Redis that does not
// answer leaves the last count in place.
func (c *census) count(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, censusEvery)
	defer cancel()
	d, err := c.store.Take(ctx, &limit.Request{Key: censusKey, Limits: []limit.Limit{censusLimit}})
	if err != nil || !d.Allowed {
		c.log.LogAttrs(ctx, slog.LevelDebug, "gateways sharing this Redis not counted", slog.Any("error", err), slog.Bool("allowed", d.Allowed))
		return
	}
	entries := censusLimit.Count - d.Remaining
	n := max(1, (entries+censusTicks/2)/censusTicks)
	if old := c.size.Swap(n); old != n {
		c.log.LogAttrs(ctx, slog.LevelInfo, "gateways sharing this Redis counted", slog.Int64("gateways", n), slog.Int64("before", old))
	}
}

// fleet reports the last count, 0 before the first.
func (c *census) fleet() int { return int(c.size.Load()) }

// close stops the census and waits for it.
func (c *census) close() {
	c.stop()
	<-c.done
}
