// Package rulesync is the gateway's side of the rules service: it
// subscribes to the service's snapshots with a long poll, compiles each new
// one and swaps it in with one atomic store, keeps the last one in a cache
// file for starts while the service is down, and reports what the gateway
// decided under each version, for the canary and for shadow rules.
//
// The gateway keeps serving with the snapshot it has whatever happens to
// the service: the client retries with backoff and never gives up.
package rulesync

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/longpoll"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/rules"
)

// Config configures a Client. URL and Gateway are required; the zero value
// of every other field means its default.
type Config struct {
	// URL is the rules service's base URL, such as http://rules:8083.
	URL string
	// Token is the bearer token of role gateway, if the service asks for
	// one.
	Token string
	// Gateway identifies this gateway to the service: the canary is chosen
	// among gateway IDs, and the fleet counts them. See rulesapi.CheckGatewayID.
	Gateway string
	// Region is the gateway's region, for the fleet counts.
	Region string
	// CacheFile, if set, keeps the last snapshot: it is written after each
	// new one (to a temporary file, then renamed) and read by New.
	CacheFile string
	// Wait is how long the service may hold a poll. Zero means 25 seconds.
	Wait time.Duration
	// ReportInterval is how often decision counts are sent. Zero means 5
	// seconds.
	ReportInterval time.Duration
	// Backoff bounds the wait between failed polls, which doubles from
	// its Min to its Max. Zero fields mean 100 ms and 5 s.
	Backoff longpoll.Backoff
	// HTTPClient makes the requests. Nil means a client without a total
	// timeout; each poll is bounded by Wait plus 15 seconds.
	HTTPClient *http.Client
	// Registerer receives the client's metrics. Nil means none.
	Registerer prometheus.Registerer
	// Logger receives the client's log. Nil discards it.
	Logger *slog.Logger
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
}

// Client follows the rules service. Its methods are safe for concurrent
// use. Current is what a gateway calls per request; Run must be running for
// anything to change.
type Client struct {
	cfg  Config
	base *url.URL
	log  *slog.Logger
	now  func() time.Time

	set         atomic.Pointer[rules.Set]
	canary      atomic.Bool
	fleet       atomic.Pointer[rulesapi.Fleet]
	lastContact atomic.Int64 // Unix nanoseconds of the last answer, or of the cached snapshot
	ready       chan struct{}
	readyOnce   sync.Once

	counts   counts
	metrics  *metrics
	cacheErr error // why the cache file was not used; set by New only
}

// errHeld is a 200 answer for the version the client already holds: the
// service should have held the poll, so the client waits before the next.
var errHeld = errors.New("the service answered with the snapshot already held")

// New returns a Client, loading the cache file if there is one. A cache
// file that cannot be read or does not compile is logged and ignored.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("rulesync: URL is empty")
	}
	base, err := longpoll.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("rulesync: %w", err)
	}
	if err := rulesapi.CheckGatewayID(cfg.Gateway); err != nil {
		return nil, fmt.Errorf("rulesync: %w", err)
	}
	cfg.Wait = cmp.Or(cfg.Wait, 25*time.Second)
	cfg.ReportInterval = cmp.Or(cfg.ReportInterval, 5*time.Second)
	if cfg.Wait < 0 || cfg.ReportInterval < 0 {
		return nil, errors.New("rulesync: durations must not be negative")
	}
	if err := cfg.Backoff.Check(); err != nil {
		return nil, fmt.Errorf("rulesync: %w", err)
	}
	cfg.HTTPClient = cmp.Or(cfg.HTTPClient, &http.Client{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{cfg: cfg, base: base, log: cfg.Logger, now: cfg.Now, ready: make(chan struct{})}
	c.counts.versions = map[int64]*versionCount{}
	c.counts.shadow = map[shadowID]*shadowCount{}
	c.fleet.Store(&rulesapi.Fleet{})
	c.metrics = newMetrics(c)
	if cfg.Registerer != nil {
		if err := c.Register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	// Age counts from now until the service or the cache says otherwise, so
	// a client that never hears from the service grows old and alerts.
	c.lastContact.Store(c.now().UnixNano())
	if cfg.CacheFile != "" {
		if err := c.loadCache(); err != nil {
			c.cacheErr = fmt.Errorf("cache file %s is unreadable: %w", cfg.CacheFile, err)
			c.log.Warn("rules cache not used", "file", cfg.CacheFile, "err", err)
		}
	}
	return c, nil
}

// CacheError says why the cache file could not be used at New, or is nil
// when it was used, was absent, or none was configured. A gateway that
// cannot reach the service says it when it gives up.
func (c *Client) CacheError() error { return c.cacheErr }

// Current returns the rule set in force, or nil before the first one is
// known. The set is immutable: a new snapshot replaces it whole.
func (c *Client) Current() *rules.Set { return c.set.Load() }

// Canary reports whether the service last said this gateway runs a canary
// version.
func (c *Client) Canary() bool { return c.canary.Load() }

// Ready is closed once a rule set is known, from the cache or the service.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// FleetSize returns how many gateways the service last said are
// subscribed, in total and per region, in a copy the caller may keep. It
// is zero until the service has answered once.
func (c *Client) FleetSize() rulesapi.Fleet {
	f := c.fleet.Load()
	return rulesapi.Fleet{Total: f.Total, Regions: maps.Clone(f.Regions)}
}

// Age reports how long ago the service last answered; before it has, how
// old the cached snapshot is, or without one, how long ago New was called.
func (c *Client) Age() time.Duration {
	return c.now().Sub(time.Unix(0, c.lastContact.Load()))
}

// Run follows the service until ctx ends, and then returns nil: it polls
// for snapshots, swaps each new one in, and sends reports. When ctx ends it
// sends what was counted since the last report, waiting at most 2 seconds
// for the service, before it returns.
func (c *Client) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { c.reportLoop(ctx) })
	c.pollLoop(ctx)
	wg.Wait()
	return nil
}

func (c *Client) pollLoop(ctx context.Context) {
	held := 0 // answers in a row with the version already held
	c.cfg.Backoff.Loop(ctx, func(ctx context.Context) error {
		err := c.pollOnce(ctx)
		if err == nil {
			held = 0
		}
		return err
	}, func(err error, wait time.Duration) {
		if errors.Is(err, errHeld) {
			// Not a failure, but no reason to ask again at once: a proxy
			// or a service that does not hold polls would be asked
			// without pause.
			if held++; held == 1 {
				c.log.Warn("rules service answered with the version already held; backing off", "version", c.version(), "retry_in_ms", wait.Milliseconds())
			}
			return
		}
		c.metrics.errors.Inc()
		c.log.Warn("rules service poll failed; keeping the current rules", "err", err, "retry_in_ms", wait.Milliseconds(), "version", c.version())
	})
}

func (c *Client) version() int64 {
	if s := c.set.Load(); s != nil {
		return s.Version
	}
	return 0
}

// pollOnce asks for the snapshot after the current one and swaps it in.
func (c *Client) pollOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Wait+15*time.Second)
	defer cancel()
	q := url.Values{"after": {strconv.FormatInt(c.version(), 10)}, "gateway": {c.cfg.Gateway},
		"region": {c.cfg.Region}, "wait": {c.cfg.Wait.String()}}
	u := c.base.JoinPath(rulesapi.SnapshotPath)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	resp, err := longpoll.Do(c.cfg.HTTPClient, req, c.cfg.Token)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		c.contact(resp.Header)
		return nil
	}
	var sn rulesapi.Snapshot
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&sn); err != nil {
		return fmt.Errorf("poll: decode snapshot: %w", err)
	}
	set, err := c.compile(&sn)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	c.contact(resp.Header)
	if cur := c.set.Load(); cur != nil && cur.Version == set.Version {
		if cur.Hash != set.Hash {
			return fmt.Errorf("poll: snapshot %d has hash %s, but the one held has %s: refusing a second rule set under one version",
				set.Version, set.Hash, cur.Hash)
		}
		return errHeld // nothing new; a service never answers so, but a proxy might
	}
	// Cache first: a gateway killed right after the swap then restarts
	// with the rules it was running, not older ones.
	if c.cfg.CacheFile != "" {
		if err := c.saveCache(&sn); err != nil {
			c.log.Warn("rules cache not written", "file", c.cfg.CacheFile, "err", err)
		}
	}
	c.swap(set, sn.Canary, &sn.Fleet)
	if sn.Rollback {
		c.log.Warn("rules rolled back: the canary version held was halted or superseded", "version", set.Version,
			"hash", set.Hash, "fleet", sn.Fleet.Total)
	} else {
		c.log.Info("rules snapshot loaded", "version", set.Version, "hash", set.Hash, "canary", sn.Canary,
			"fleet", sn.Fleet.Total)
	}
	return nil
}

// compile turns a snapshot into a rule set, checking its hash. It refuses
// a snapshot the client must not swap in: a version that is not positive,
// which no service makes and which the next poll could not name, and a
// version older than the one held unless the service marks it a rollback.
// An older version without the mark comes from a replica or a proxy that
// is behind: taking it would undo changes the client already runs.
func (c *Client) compile(sn *rulesapi.Snapshot) (*rules.Set, error) {
	if sn.Version <= 0 {
		return nil, fmt.Errorf("snapshot version %d is not positive: refusing it", sn.Version)
	}
	if cur := c.set.Load(); cur != nil && sn.Version < cur.Version && !sn.Rollback {
		return nil, fmt.Errorf("snapshot %d is older than the %d held and the service did not mark it a rollback: "+
			"refusing it (a replica or proxy that is behind?)", sn.Version, cur.Version)
	}
	var doc rules.Document
	if err := json.Unmarshal(sn.Document, &doc); err != nil {
		return nil, fmt.Errorf("snapshot %d: decode document: %w", sn.Version, err)
	}
	set, err := rules.Compile(doc, sn.Version)
	if err != nil {
		return nil, fmt.Errorf("snapshot %d: %w", sn.Version, err)
	}
	if set.Hash != sn.Hash {
		return nil, fmt.Errorf("snapshot %d: hash %s does not match the service's %s", sn.Version, set.Hash, sn.Hash)
	}
	return set, nil
}

// swap makes set the one in force: one atomic store, so a request sees the
// old set or the new one, never a mix.
func (c *Client) swap(set *rules.Set, canary bool, fleet *rulesapi.Fleet) {
	c.set.Store(set)
	c.canary.Store(canary)
	if fleet != nil {
		c.setFleet(*fleet)
	}
	c.metrics.version.Set(float64(set.Version))
	c.metrics.canary.Set(map[bool]float64{false: 0, true: 1}[canary])
	n := len(set.Document().Rules)
	c.metrics.rules.Set(float64(n))
	if n == 0 {
		// A rules file without rules is refused; a snapshot without them
		// is the service's word, but must not pass unnoticed.
		c.log.Warn("the rules snapshot has no rules: no request is limited until rules are added to the rules service",
			"version", set.Version, "hash", set.Hash)
	}
	c.readyOnce.Do(func() { close(c.ready) })
}

// contact records an answer from the service and the fleet and canary
// state it carried.
func (c *Client) contact(h http.Header) {
	c.lastContact.Store(c.now().UnixNano())
	if v := h.Get(rulesapi.CanaryHeader); v != "" {
		c.canary.Store(v == "1")
		c.metrics.canary.Set(map[bool]float64{false: 0, true: 1}[v == "1"])
	}
	if v := h.Get(rulesapi.FleetHeader); v != "" {
		var f rulesapi.Fleet
		if err := json.Unmarshal([]byte(v), &f); err == nil {
			c.setFleet(f)
		}
	}
}

func (c *Client) setFleet(f rulesapi.Fleet) {
	c.fleet.Store(&f)
	c.metrics.fleet.Set(float64(f.Total))
}

// cacheFile is what the cache file holds.
type cacheFile struct {
	Snapshot rulesapi.Snapshot `json:"snapshot"`
	SavedAt  time.Time         `json:"saved_at"`
}

func (c *Client) loadCache() error {
	b, err := os.ReadFile(c.cfg.CacheFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var cf cacheFile
	if err := json.Unmarshal(b, &cf); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	set, err := c.compile(&cf.Snapshot)
	if err != nil {
		return err
	}
	// The cached fleet is stale but better than nothing for dividing
	// limits while the service is down.
	c.swap(set, false, &cf.Snapshot.Fleet)
	c.lastContact.Store(cf.SavedAt.UnixNano())
	c.log.Info("rules loaded from cache", "file", c.cfg.CacheFile, "version", set.Version, "saved_at", cf.SavedAt)
	return nil
}

// saveCache writes the snapshot to a temporary file in the cache's
// directory and renames it over the cache, so a crash leaves the old file
// or the new one, never half of one.
func (c *Client) saveCache(sn *rulesapi.Snapshot) error {
	b, err := json.Marshal(cacheFile{Snapshot: *sn, SavedAt: c.now().UTC()})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(c.cfg.CacheFile), "."+filepath.Base(c.cfg.CacheFile)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.cfg.CacheFile)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
