package relay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// URLs are the base URLs of this data centre's relays (LeasePath is
	// added), tried in turn from Prefer. At least one.
	URLs []string
	// Prefer is the index in URLs of the relay tried first, so that a
	// fleet spreads over its relays (say, a hash of the gateway's name).
	// It is taken modulo len(URLs).
	Prefer int
	// Token is the bearer token the relays ask for.
	Token string
	// Direct is the store leased from while no relay answers: the guard
	// over Redis, the path a gateway takes without a relay, with its
	// deadlines, breakers and local fallback. Required.
	Direct limit.Granter
	// Timeout bounds one request to a relay; past it the relay counts as
	// failed and the takes go to the next relay, or Direct. Zero means
	// 50ms.
	Timeout time.Duration
	// Retry is how long a relay that failed is left alone before it is
	// tried again. Zero means 1s.
	Retry time.Duration
	// Conns is how many requests to relays may be in flight at once;
	// concurrent takes beyond it wait and go together, up to MaxTakes a
	// request. Zero means 8.
	Conns int
	// HTTPClient sends the requests. Nil means a client of its own.
	HTTPClient *http.Client
	// Logger receives relay failures at warn level. Nil discards.
	Logger *slog.Logger
	// Registerer receives the client's metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Client is a gateway's lease.Leaser over its relays, falling back to
// Direct while none answers. It is safe for concurrent use and owns the
// goroutines that send to the relays; Close stops them.
type Client struct {
	relays  []*relayConn
	prefer  int
	token   string
	direct  limit.Granter
	timeout time.Duration
	retry   time.Duration
	http    *http.Client
	log     *slog.Logger
	m       *clientMetrics

	queue  chan *call
	ctx    context.Context // requests to relays run under it; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup // the senders
}

// relayConn is one relay and when it may next be tried.
type relayConn struct {
	url       string
	downUntil atomic.Int64 // Unix ns; 0 while it answers
}

// call is one take waiting for a relay's answer.
type call struct {
	take Take
	done chan result // buffered: the sender never waits
}

// result is a relay's answer to a call; failed means no relay answered.
type result struct {
	g      Grant
	failed bool
}

var _ lease.Leaser = (*Client)(nil)

// NewClient returns a Client over cfg.URLs and starts its senders.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case len(cfg.URLs) == 0:
		return nil, errors.New("relay: no relay URL")
	case cfg.Direct == nil:
		return nil, errors.New("relay: no direct store to fall back to")
	case cfg.Timeout < 0 || cfg.Retry < 0 || cfg.Conns < 0:
		return nil, fmt.Errorf("relay: negative timeout %v, retry %v or conns %d", cfg.Timeout, cfg.Retry, cfg.Conns)
	}
	c := &Client{
		token: cfg.Token, direct: cfg.Direct,
		timeout: cmp.Or(cfg.Timeout, 50*time.Millisecond), retry: cmp.Or(cfg.Retry, time.Second),
		log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
	}
	for _, u := range cfg.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("relay: URL %q: want http://host:port or https://host:port", u)
		}
		c.relays = append(c.relays, &relayConn{url: p.JoinPath(LeasePath).String()})
	}
	c.prefer = (cfg.Prefer%len(c.relays) + len(c.relays)) % len(c.relays)
	c.http = cmp.Or(cfg.HTTPClient, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cmp.Or(cfg.Conns, 8), IdleConnTimeout: time.Minute}})
	var err error
	if c.m, err = newClientMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	c.queue = make(chan *call, MaxTakes)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for range cmp.Or(cfg.Conns, 8) {
		c.wg.Go(c.send)
	}
	return c, nil
}

// Close stops the senders; takes after it go to Direct. Close is
// idempotent.
func (c *Client) Close() {
	c.cancel()
	c.wg.Wait()
}

// Take implements limit.Store.
func (c *Client) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	g, err := c.Lease(ctx, req, 0)
	return g.Decision, err
}

// TakeUpTo implements limit.Granter.
func (c *Client) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	g, err := c.Lease(ctx, req, want)
	return g.Granted, g.Decision, err
}

// Lease implements lease.Leaser: a sub-lease from a relay, whose TTL ends
// with the relay's lease, or, while no relay answers, a grant from Direct
// with no bound of its own (the caller's TTL applies). A relay that fails
// costs its takes no error: they go to the next relay, then to Direct.
func (c *Client) Lease(ctx context.Context, req *limit.Request, want int64) (lease.Grant, error) {
	if len(req.Key) > MaxKeyBytes || len(req.Limits) > MaxLimits || !c.anyUp() {
		return c.fromDirect(ctx, req, want)
	}
	cl := &call{take: takeOf(req, want), done: make(chan result, 1)}
	select {
	case c.queue <- cl:
	case <-ctx.Done():
		return lease.Grant{}, fmt.Errorf("relay: %w", ctx.Err())
	case <-c.ctx.Done():
		return c.fromDirect(ctx, req, want)
	}
	select {
	case r := <-cl.done:
		if r.failed || (r.g.Error != "" && !r.g.Invalid) {
			// No relay answered, or the relay could not answer this take
			// (its own deadline): Redis directly, rather than an error.
			return c.fromDirect(ctx, req, want)
		}
		c.m.via(true)
		return r.g.lease()
	case <-ctx.Done():
		return lease.Grant{}, fmt.Errorf("relay: %w", ctx.Err())
	case <-c.ctx.Done():
		// Closed with the call queued: no sender will take it.
		return c.fromDirect(ctx, req, want)
	}
}

// unbounded is the TTL of a grant from Direct: Redis's tokens carry no
// lease but the caller's own.
const unbounded = time.Duration(math.MaxInt64)

// fromDirect takes from Direct, as a gateway does without a relay.
func (c *Client) fromDirect(ctx context.Context, req *limit.Request, want int64) (lease.Grant, error) {
	c.m.via(false)
	if want <= req.EffectiveCost() {
		d, err := c.direct.Take(ctx, req)
		if err != nil || !d.Allowed {
			return lease.Grant{Decision: d}, err
		}
		return lease.Grant{Granted: req.EffectiveCost(), TTL: unbounded, Decision: d}, nil
	}
	n, d, err := c.direct.TakeUpTo(ctx, req, want)
	return lease.Grant{Granted: n, TTL: unbounded, Decision: d}, err
}

// anyUp reports whether some relay may be tried now.
func (c *Client) anyUp() bool {
	now := time.Now().UnixNano()
	return slices.ContainsFunc(c.relays, func(r *relayConn) bool { return r.downUntil.Load() <= now })
}

// send is one sender: it takes the calls waiting, up to MaxTakes, and
// sends them to a relay in one request, until Close.
func (c *Client) send() {
	batch := make([]*call, 0, MaxTakes)
	for {
		select {
		case first := <-c.queue:
			batch = append(batch[:0], first)
		more:
			for len(batch) < MaxTakes {
				select {
				case cl := <-c.queue:
					batch = append(batch, cl)
				default:
					break more
				}
			}
			c.post(batch)
		case <-c.ctx.Done():
			return
		}
	}
}

// post sends batch to the relays in turn from the preferred one, and
// hands each call its answer, or failed when no relay answered.
func (c *Client) post(batch []*call) {
	body := LeaseRequest{Takes: make([]Take, len(batch))}
	for i, cl := range batch {
		body.Takes[i] = cl.take
	}
	buf, err := json.Marshal(&body)
	if err == nil {
		for i := range c.relays {
			r := c.relays[(c.prefer+i)%len(c.relays)]
			now := time.Now()
			if r.downUntil.Load() > now.UnixNano() {
				continue
			}
			resp, err := c.ask(r.url, buf, len(batch))
			if err == nil {
				r.downUntil.Store(0)
				for i, cl := range batch {
					cl.done <- result{g: resp.Grants[i]}
				}
				return
			}
			if c.ctx.Err() != nil {
				break
			}
			c.m.failed()
			r.downUntil.Store(now.Add(c.retry).UnixNano())
			c.log.LogAttrs(c.ctx, slog.LevelWarn, "relay failed: leasing from the next relay, or redis directly", slog.String("relay", r.url),
				slog.Duration("retry_in", c.retry), slog.Any("error", err))
		}
	}
	for _, cl := range batch {
		cl.done <- result{failed: true}
	}
}

// ask sends one request to a relay and checks the answer's shape.
func (c *Client) ask(u string, body []byte, n int) (*LeaseResponse, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("relay answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var out LeaseResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64*MaxBodyBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("relay answer unreadable: %w", err)
	}
	if len(out.Grants) != n {
		return nil, fmt.Errorf("relay answered %d grants to %d takes", len(out.Grants), n)
	}
	return &out, nil
}
