package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/relay"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// RelayConfig configures RelayScale: many virtual gateways in this
// process, each its own lease store, leasing from Redis directly and then
// through a few relays on loopback, on the same traffic. Zero fields mean
// the defaults given.
type RelayConfig struct {
	// Addrs is the Redis the run counts in.
	Addrs []string
	// Gateways is how many virtual gateways share the traffic; zero means
	// 2000.
	Gateways int
	// Relays is how many relays serve them, each gateway one; zero means 4.
	Relays int
	// QuietKeys is how many quiet keys share the rest of the traffic;
	// zero means 10,000.
	QuietKeys int
	// HotShare is the share of requests for the one busy key; zero means
	// 0.5.
	HotShare float64
	// Hot is the busy key's limit; zero means 100 a second, bursts of
	// 100: with 2,000 gateways each one's share of 100 ms of it rounds
	// to a batch of 1, as 100,000 a second does over 30,000 gateways.
	Hot limit.Limit
	// Quiet is each quiet key's limit; zero means 100 a second.
	Quiet limit.Limit
	// Rate is the requests a second offered, in both modes alike; zero
	// means 3,000. A mode that cannot keep up sends fewer (Requests says).
	Rate float64
	// Workers is how many goroutines send requests; zero means 64.
	Workers int
	// Duration is how long each mode runs; zero means 3 s.
	Duration time.Duration
}

func (c *RelayConfig) defaults() {
	c.Gateways = cmp.Or(c.Gateways, 2000)
	c.Relays = cmp.Or(c.Relays, 4)
	c.QuietKeys = cmp.Or(c.QuietKeys, 10_000)
	c.HotShare = cmp.Or(c.HotShare, 0.5)
	if c.Hot.Count == 0 {
		c.Hot = limit.Limit{Name: "s", Count: 100, Period: time.Second, Burst: 100}
	}
	if c.Quiet.Count == 0 {
		c.Quiet = limit.Limit{Name: "s", Count: 100, Period: time.Second}
	}
	c.Rate = cmp.Or(c.Rate, 3000)
	c.Workers = cmp.Or(c.Workers, 64)
	c.Duration = cmp.Or(c.Duration, 3*time.Second)
}

// RelayResult is one mode's figures.
type RelayResult struct {
	// Mode is "direct" (every gateway leases from Redis) or "relay".
	Mode    string
	Seconds float64
	// Requests counts every decision; Errors those that failed.
	Requests, Errors int64
	// HotRequests, HotAdmitted: the busy key's. HotAllowed is what its
	// limit allows over the run from a full bucket: burst + rate × time.
	HotRequests, HotAdmitted, HotAllowed int64
	// QuietRequests, QuietAdmitted: the quiet keys'.
	QuietRequests, QuietAdmitted int64
	// RedisCalls counts the calls that reached the guarded Redis store,
	// from gateways and relays alike.
	RedisCalls int64
	// HotCalls are the Redis calls for the busy key alone.
	HotCalls int64
	// DirectCalls are the gateways' calls to Redis directly because no
	// relay answered (relay mode).
	DirectCalls int64
	// GatewayBatch and RelayBatch are the busy key's lease batch for one
	// gateway leasing from Redis and for one relay.
	GatewayBatch, RelayBatch int64
}

// CallsPerRequest is Redis calls a decision.
func (r RelayResult) CallsPerRequest() float64 {
	return float64(r.RedisCalls) / float64(max(r.Requests, 1))
}

// HotCallsPerRequest is the busy key's Redis calls per request for it.
func (r RelayResult) HotCallsPerRequest() float64 {
	return float64(r.HotCalls) / float64(max(r.HotRequests, 1))
}

// HotMultiple is how many times its limit the busy key was asked.
func (r RelayResult) HotMultiple() float64 {
	return float64(r.HotRequests) / float64(max(r.HotAllowed, 1))
}

// RelayScale runs cfg's traffic twice, leasing from Redis directly and
// then through relays, and returns both modes' figures.
func RelayScale(ctx context.Context, cfg RelayConfig) ([]RelayResult, error) {
	cfg.defaults()
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("bench: relay run needs a Redis address")
	}
	if err := cfg.Hot.Validate(); err != nil {
		return nil, fmt.Errorf("bench: hot limit: %w", err)
	}
	rs, err := redisstore.New(ctx, redisstore.Config{Addrs: cfg.Addrs})
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	g, err := guard.New(rs, guard.Config{Fleet: limit.Fleet{Gateways: cfg.Gateways}})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	var out []RelayResult
	for _, mode := range []string{"direct", "relay"} {
		hot := "k:relay-bench-hot-" + mode + "-" + fmt.Sprint(time.Now().UnixNano())
		r, err := relayMode(ctx, cfg, &countingGranter{Granter: g, hot: hot}, mode)
		if err != nil {
			return out, fmt.Errorf("bench: relay run, mode %s: %w", mode, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// countingGranter counts the calls that pass it, and those for hot.
type countingGranter struct {
	limit.Granter
	hot     string // set before a mode starts, read while it runs
	n, hotN atomic.Int64
}

func (c *countingGranter) count(req *limit.Request) {
	c.n.Add(1)
	if req.Key == c.hot {
		c.hotN.Add(1)
	}
}

func (c *countingGranter) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	c.count(req)
	return c.Granter.Take(ctx, req)
}

func (c *countingGranter) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	c.count(req)
	return c.Granter.TakeUpTo(ctx, req, want)
}

// relayMode runs one mode over redis and returns its figures.
func relayMode(ctx context.Context, cfg RelayConfig, redis *countingGranter, mode string) (RelayResult, error) {
	res := RelayResult{Mode: mode}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	inner := make([]limit.Granter, cfg.Gateways)
	for i := range inner {
		inner[i] = redis
	}
	if mode == "relay" {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.Workers, IdleConnTimeout: time.Minute}}
		closers = append(closers, hc.CloseIdleConnections)
		urls := make([]string, cfg.Relays)
		for i := range urls {
			u, stop, err := serveRelay(redis, cfg.Relays)
			if err != nil {
				return res, err
			}
			urls[i], closers = u, append(closers, stop)
		}
		direct := &countingGranter{Granter: redis, hot: redis.hot}
		defer func() { res.DirectCalls = direct.n.Load() }()
		for i := range inner {
			c, err := relay.NewClient(relay.ClientConfig{URLs: []string{urls[i%len(urls)]}, Direct: direct, HTTPClient: hc, Conns: 1,
				Timeout: time.Second})
			if err != nil {
				return res, err
			}
			inner[i], closers = c, append(closers, c.Close)
		}
	}
	gws := make([]*lease.Store, cfg.Gateways)
	for i := range gws {
		s, err := lease.New(inner[i], lease.Config{Fleet: limit.Fleet{Gateways: cfg.Gateways}})
		if err != nil {
			return res, err
		}
		gws[i], closers = s, append(closers, s.Close)
	}
	res.GatewayBatch = max(1, int64(float64(cfg.Hot.Count)/cfg.Hot.Period.Seconds()/10/float64(cfg.Gateways)))
	res.RelayBatch = max(1, int64(float64(cfg.Hot.Count)/cfg.Hot.Period.Seconds()/10/float64(cfg.Relays)))
	hotKey := redis.hot
	quietPrefix := "k:relay-bench-quiet-" + mode + "-" + fmt.Sprint(time.Now().UnixNano()) + "-"
	var hotN, hotOK, quietN, quietOK, errs atomic.Int64
	before := redis.n.Load()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w)+1, 24))
			hot := &limit.Request{Key: hotKey, Limits: []limit.Limit{cfg.Hot}}
			every := time.Duration(float64(cfg.Workers) / cfg.Rate * float64(time.Second))
			next := time.Now()
			for runCtx.Err() == nil {
				// Paced: the same offered rate in both modes; a worker
				// behind its schedule sends at once.
				next = next.Add(every)
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-runCtx.Done():
						return
					}
				}
				gw := gws[rng.IntN(len(gws))]
				req, n, ok := hot, &hotN, &hotOK
				if rng.Float64() >= cfg.HotShare {
					req = &limit.Request{Key: quietPrefix + fmt.Sprint(rng.IntN(cfg.QuietKeys)), Limits: []limit.Limit{cfg.Quiet}}
					n, ok = &quietN, &quietOK
				}
				cctx, ccancel := context.WithTimeout(ctx, time.Second)
				d, err := gw.Take(cctx, req)
				ccancel()
				n.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
				case d.Allowed:
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.Seconds = elapsed.Seconds()
	res.HotRequests, res.HotAdmitted = hotN.Load(), hotOK.Load()
	res.QuietRequests, res.QuietAdmitted = quietN.Load(), quietOK.Load()
	res.Requests, res.Errors = res.HotRequests+res.QuietRequests, errs.Load()
	res.HotAllowed = cfg.Hot.EffectiveBurst() + int64(float64(cfg.Hot.Count)*elapsed.Seconds()/cfg.Hot.Period.Seconds())
	res.RedisCalls, res.HotCalls = redis.n.Load()-before, redis.hotN.Load()
	return res, nil
}

// serveRelay serves a relay over inner on loopback, leasing its share of
// relays, and returns its URL and how to stop it.
func serveRelay(inner limit.Granter, relays int) (string, func(), error) {
	ls, err := lease.New(inner, lease.Config{Fleet: limit.Fleet{Gateways: relays}, WaitForRefill: true})
	if err != nil {
		return "", nil, err
	}
	s, err := relay.NewServer(relay.ServerConfig{Store: ls, TrustedNetwork: true})
	if err != nil {
		ls.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ls.Close()
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		<-done
		ls.Close()
	}, nil
}
