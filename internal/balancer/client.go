package balancer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/share"
)

// ClientConfig configures a Client. URLs, Region, Gateway and Store are
// required; the zero value of every other field means its default.
type ClientConfig struct {
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
	// MinBackoff and MaxBackoff bound the wait between failed polls. Zero
	// means 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// HTTPClient makes the requests. Nil means a client without a total
	// timeout; each call is bounded by Wait plus 10 seconds.
	HTTPClient *http.Client
	// Logger receives the client's log. Nil means slog.Default().
	Logger *slog.Logger
}

// Client keeps a share.Store's table in step with the balancer and reports
// the store's usage to it. Nothing it does is on a request's path: requests
// read the table in force, and a slow or absent balancer only delays the
// next table. Run must be running for anything to change.
type Client struct {
	cfg  ClientConfig
	urls []*url.URL
	log  *slog.Logger
	cur  atomic.Int32 // index in urls of the balancer in use
}

// NewClient returns a Client for cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case len(cfg.URLs) == 0:
		return nil, errors.New("balancer client: no balancer URL")
	case cfg.Region == "":
		return nil, errors.New("balancer client: region is empty")
	case cfg.Gateway == "":
		return nil, errors.New("balancer client: gateway ID is empty")
	case cfg.Store == nil:
		return nil, errors.New("balancer client: share store is nil")
	case cfg.Interval < 0 || cfg.Wait < 0 || cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 || cfg.Top < 0:
		return nil, errors.New("balancer client: durations and Top must not be negative")
	}
	c := &Client{cfg: cfg}
	for _, s := range cfg.URLs {
		u, err := url.Parse(strings.TrimSuffix(s, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("balancer client: URL %q: want an http or https URL with a host", s)
		}
		c.urls = append(c.urls, u)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.cfg.Interval, 10*time.Second)
	def(&c.cfg.Wait, 25*time.Second)
	def(&c.cfg.MinBackoff, 100*time.Millisecond)
	def(&c.cfg.MaxBackoff, 5*time.Second)
	if c.cfg.MaxBackoff < c.cfg.MinBackoff {
		return nil, fmt.Errorf("balancer client: MaxBackoff %v is below MinBackoff %v", c.cfg.MaxBackoff, c.cfg.MinBackoff)
	}
	if c.cfg.Top == 0 {
		c.cfg.Top = 100
	}
	if c.cfg.HTTPClient == nil {
		c.cfg.HTTPClient = &http.Client{}
	}
	c.log = cfg.Logger
	if c.log == nil {
		c.log = slog.Default()
	}
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
	backoff := c.cfg.MinBackoff
	for ctx.Err() == nil {
		u := c.base()
		err := c.pollOnce(ctx, u)
		if err == nil {
			backoff = c.cfg.MinBackoff
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errTryNext) {
			c.failed(u)
		}
		d := backoff/2 + rand.N(backoff/2+1)
		c.log.Warn("balancer poll failed; keeping the current region shares", "balancer", u.String(), "err", err,
			"retry_in", d, "share_age", c.cfg.Store.Age().String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
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
	pu := u.JoinPath(SharesPath)
	pu.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pu.String(), nil)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	c.auth(req)
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("poll: %w (%w)", err, errTryNext)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		c.cfg.Store.Touch()
		return nil
	case http.StatusOK:
	default:
		if resp.Header.Get(StandbyHeader) != "" {
			return fmt.Errorf("poll: %s (%w)", describe(resp), errTryNext)
		}
		return fmt.Errorf("poll: %s", describe(resp))
	}
	var sh Shares
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
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		select {
		case inFlight <- struct{}{}:
		default:
			// Too many unanswered: skip this tick; the next report
			// covers its span too.
			continue
		}
		u := c.base()
		wg.Go(func() {
			defer func() { <-inFlight }()
			if err := c.report(ctx, u); err != nil && ctx.Err() == nil {
				// The counts are lost: the next report covers its own span.
				c.log.Warn("balancer report failed", "balancer", u.String(), "err", err)
			}
		})
	}
}

// report sends the usage counted since the last report to u.
func (c *Client) report(ctx context.Context, u *url.URL) error {
	us := c.cfg.Store.Usage(c.cfg.Top)
	rep := Report{Region: c.cfg.Region, Gateway: c.cfg.Gateway, SpanMillis: max(us.Span.Milliseconds(), 1), Total: us.Total,
		SentMillis: time.Now().UnixMilli()}
	for _, p := range us.Pairs {
		rep.Pairs = append(rep.Pairs, PairReport{Key: p.Key, Limit: p.Limit, Asked: p.Asked, Admitted: p.Admitted})
	}
	if err := rep.Validate(); err != nil {
		// A key the balancer would refuse (not UTF-8, too long) or too
		// many pairs: leave those keys out, and keep the busiest pairs
		// (Usage lists them first) rather than send a report the
		// balancer refuses whole.
		rep.Pairs = validPairs(rep.Pairs)
		if n := len(rep.Pairs); n > MaxPairsPerReport {
			c.log.Warn("balancer report trimmed to the most pairs a report may carry", "pairs", n, "kept", MaxPairsPerReport)
			rep.Pairs = rep.Pairs[:MaxPairsPerReport]
		}
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Interval+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.JoinPath(ReportPath).String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	c.auth(req)
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("report: %s", describe(resp))
	}
	return nil
}

func (c *Client) auth(req *http.Request) {
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
}

// validPairs returns the pairs of ps a report may carry.
func validPairs(ps []PairReport) []PairReport {
	out := ps[:0]
	for _, p := range ps {
		one := Report{Gateway: "x", SpanMillis: 1, Pairs: []PairReport{p}}
		if one.Validate() == nil {
			out = append(out, p)
		}
	}
	return out
}

// describe summarizes an error answer: its status and the balancer's
// message.
func describe(resp *http.Response) string {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return fmt.Sprintf("%s: %s", resp.Status, e.Error)
	}
	return resp.Status
}
