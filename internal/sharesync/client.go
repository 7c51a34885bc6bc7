// Package sharesync is the gateway's side of the quota balancer
// (internal/balancersvc): it keeps a share.Store's table of region shares
// in step with the balancer through a long poll, and reports the store's
// usage to it every interval. Nothing it does is on a request's path.
package sharesync

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/longpoll"
	"github.com/sluice-rl/sluice/share"
)

// Config configures a Client. URLs, Region, Gateway and Store are
// required; the zero value of every other field means its default.
type Config struct {
	// URLs are the balancer's base URLs, the active one first: the client
	// moves to the next when the one it uses cannot be reached or answers
	// as a standby, and so comes back round to the first.
	URLs []string
	// Region is the gateway's region.
	Region string
	// Gateway identifies the gateway to the balancer.
	Gateway string
	// Store is the share layer the shares go to and the usage comes from.
	Store *share.Store
	// Token is the bearer token the balancer asks for, if any.
	Token string
	// Interval is how often usage is reported. Zero means 10 seconds.
	Interval time.Duration
	// Top is how many of the busiest limits of keys each report carries,
	// besides those the balancer already balances. Zero means 100.
	Top int
	// Wait is how long the balancer may hold a poll. Zero means 25
	// seconds.
	Wait time.Duration
	// Backoff bounds the wait between failed polls, which doubles from
	// its Min to its Max. Zero fields mean 100 ms and 5 s.
	Backoff longpoll.Backoff
	// HTTPClient makes the requests. Nil means a client without a total
	// timeout; each call is bounded by Wait plus 10 seconds.
	HTTPClient *http.Client
	// Logger receives the client's log. Nil discards it.
	Logger *slog.Logger
}

// Client keeps a share.Store's table in step with the balancer and reports
// the store's usage to it. Nothing it does is on a request's path: requests
// read the table in force, and a slow or absent balancer only delays the
// next table. Run must be running for anything to change.
type Client struct {
	cfg  Config
	urls []*url.URL
	log  *slog.Logger
	cur  atomic.Int32 // index in urls of the balancer in use
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	switch {
	case len(cfg.URLs) == 0:
		return nil, errors.New("balancer client: no balancer URL")
	case cfg.Region == "":
		return nil, errors.New("balancer client: region is empty")
	case cfg.Gateway == "":
		return nil, errors.New("balancer client: gateway ID is empty")
	case cfg.Store == nil:
		return nil, errors.New("balancer client: share store is nil")
	case cfg.Interval < 0 || cfg.Wait < 0 || cfg.Top < 0:
		return nil, errors.New("balancer client: durations and Top must not be negative")
	}
	if err := cfg.Backoff.Check(); err != nil {
		return nil, fmt.Errorf("balancer client: %w", err)
	}
	c := &Client{cfg: cfg}
	for _, s := range cfg.URLs {
		u, err := longpoll.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("balancer client: %w", err)
		}
		c.urls = append(c.urls, u)
	}
	c.cfg.Interval = cmp.Or(c.cfg.Interval, 10*time.Second)
	c.cfg.Wait = cmp.Or(c.cfg.Wait, 25*time.Second)
	c.cfg.Top = cmp.Or(c.cfg.Top, 100)
	c.cfg.HTTPClient = cmp.Or(c.cfg.HTTPClient, &http.Client{})
	c.log = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return c, nil
}

// Run polls for shares and reports usage until ctx is done, then returns.
func (c *Client) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { c.reportLoop(ctx) })
	c.pollLoop(ctx)
	wg.Wait()
}

func (c *Client) base() *url.URL { return c.urls[int(c.cur.Load())%len(c.urls)] }

// errTryNext marks a failed call that another balancer might answer: the
// balancer could not be reached, or is a standby.
var errTryNext = errors.New("try the next balancer")

// failed moves to the next balancer URL after a failed call to u.
func (c *Client) failed(u *url.URL) {
	if len(c.urls) > 1 && c.base() == u {
		c.cur.Store((c.cur.Load() + 1) % int32(len(c.urls)))
	}
}

func (c *Client) pollLoop(ctx context.Context) {
	var u *url.URL // the balancer of the poll in progress
	c.cfg.Backoff.Loop(ctx, func(ctx context.Context) error {
		u = c.base()
		return c.pollOnce(ctx, u)
	}, func(err error, wait time.Duration) {
		if errors.Is(err, errTryNext) {
			c.failed(u)
		}
		c.log.Warn("balancer poll failed; keeping the current region shares", "balancer", u.String(), "err", err,
			"retry_in_ms", wait.Milliseconds(), "share_age_ms", c.cfg.Store.Age().Milliseconds())
	})
}

// pollOnce asks u for the shares after the ones in force and swaps them in.
func (c *Client) pollOnce(ctx context.Context, u *url.URL) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Wait+10*time.Second)
	defer cancel()
	var version int64
	if t := c.cfg.Store.Current(); t != nil {
		version = t.Version
	}
	q := url.Values{"region": {c.cfg.Region}, "after": {strconv.FormatInt(version, 10)}, "wait": {c.cfg.Wait.String()}}
	pu := u.JoinPath(balancer.SharesPath)
	pu.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pu.String(), nil)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	resp, err := longpoll.Do(c.cfg.HTTPClient, req, c.cfg.Token)
	if se, ok := errors.AsType[*longpoll.StatusError](err); err != nil && (!ok || se.Header.Get(balancer.StandbyHeader) != "") {
		// Unreachable, or a standby: another balancer may answer.
		return fmt.Errorf("poll: %w (%w)", err, errTryNext)
	}
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		c.cfg.Store.Touch()
		return nil
	}
	var sh balancer.Shares
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&sh); err != nil {
		return fmt.Errorf("poll: decode shares: %w", err)
	}
	if sh.Region != c.cfg.Region {
		return fmt.Errorf("poll: got the shares of region %q, want %q", sh.Region, c.cfg.Region)
	}
	t := &share.Table{Version: sh.Version, Default: sh.Default, Shares: make(map[share.Pair]uint32, len(sh.Shares))}
	for _, p := range sh.Shares {
		t.Shares[share.Pair{Key: p.Key, Limit: p.Limit}] = p.Share
	}
	if err := c.cfg.Store.Set(t); err != nil {
		return fmt.Errorf("poll: shares version %d: %w", sh.Version, err)
	}
	c.log.Debug("region shares loaded", "version", sh.Version, "default", float64(sh.Default)/share.Whole, "keys", len(sh.Shares))
	return nil
}

// maxReportsInFlight bounds the reports sent and not yet answered. Reports
// do not wait for each other: over a slow path to the balancer each still
// covers one interval and arrives one interval after the last, so the
// region never looks silent (down) for the path's delay alone.
const maxReportsInFlight = 4

func (c *Client) reportLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	inFlight := make(chan struct{}, maxReportsInFlight)
	// The first report goes at once: a balancer that counted this region
	// down (its gateways were gone, or cut off) counts it up again only
	// from a report, and holds its polls until then.
	for {
		select {
		case inFlight <- struct{}{}:
			u := c.base()
			wg.Go(func() {
				defer func() { <-inFlight }()
				if err := c.report(ctx, u); err != nil && ctx.Err() == nil {
					// The counts are lost: the next report covers its own span.
					c.log.Warn("balancer report failed", "balancer", u.String(), "err", err)
				}
			})
		default:
			// Too many unanswered: skip this tick; the next report
			// covers its span too.
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// report sends the usage counted since the last report to u.
func (c *Client) report(ctx context.Context, u *url.URL) error {
	us := c.cfg.Store.Usage(c.cfg.Top)
	rep := balancer.Report{Region: c.cfg.Region, Gateway: c.cfg.Gateway, SpanMillis: max(us.Span.Milliseconds(), 1), Total: us.Total,
		SentMillis: time.Now().UnixMilli()}
	for _, p := range us.Pairs {
		rep.Pairs = append(rep.Pairs, balancer.PairReport{Key: p.Key, Limit: p.Limit, Asked: p.Asked, Admitted: p.Admitted})
	}
	if err := rep.Validate(); err != nil {
		// A key the balancer would refuse (not UTF-8, too long) or too
		// many pairs: leave those keys out, and keep the busiest pairs
		// (Usage lists them first) rather than send a report the
		// balancer refuses whole.
		rep.Pairs = validPairs(rep.Pairs)
		if n := len(rep.Pairs); n > balancer.MaxPairsPerReport {
			c.log.Warn("balancer report trimmed to the most pairs a report may carry", "pairs", n, "kept", balancer.MaxPairsPerReport)
			rep.Pairs = rep.Pairs[:balancer.MaxPairsPerReport]
		}
	}
	if err := longpoll.Post(ctx, c.cfg.HTTPClient, u.JoinPath(balancer.ReportPath).String(), c.cfg.Token, rep, c.cfg.Interval+10*time.Second); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// validPairs returns the pairs of ps a report may carry.
func validPairs(ps []balancer.PairReport) []balancer.PairReport {
	out := ps[:0]
	for _, p := range ps {
		one := balancer.Report{Gateway: "x", SpanMillis: 1, Pairs: []balancer.PairReport{p}}
		if one.Validate() == nil {
			out = append(out, p)
		}
	}
	return out
}
