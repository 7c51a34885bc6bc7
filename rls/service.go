package rls

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// RuleSource hands out the rules in force. Current is called once per
// request and must be cheap and safe for concurrent use; nil means no
// configuration yet, and every descriptor is then answered OK. A *Rules
// and a *Watcher are RuleSources.
type RuleSource interface {
	Current() *Rules
}

// Config configures a Service. Store and Rules are required; a zero value
// of any other field means its default.
type Config struct {
	// Store keeps the counters: the same stack the gateway runs on
	// (pipeline.New in production; memstore or redisstore alone in tests).
	// The limited descriptors of one request that share a cost are taken
	// in one Take call.
	Store limit.Store
	// Rules supplies the domains for each request.
	Rules RuleSource
	// Logger receives store failures and ignored request fields, at most
	// once a second each. Nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics (see metrics.go). Nil registers none.
	Registerer prometheus.Registerer
	// Timeout bounds each store call. Zero means none beyond the caller's
	// deadline: a guarded store bounds its Redis calls itself.
	Timeout time.Duration
	// MaxDescriptors is the most descriptors one request may carry. Zero
	// means 64.
	MaxDescriptors int
	// MaxEntries is the most entries one descriptor may carry, at most 16.
	// Zero means 16.
	MaxEntries int
	// MaxEntryBytes bounds each entry's key, which Envoy's configuration
	// sets. Zero means 1024. Values are not bounded here: Envoy copies them
	// from the client (request_headers), and refusing the request as
	// malformed would let a long header through every limit wherever
	// Envoy fails open; counter names hash long values, and gRPC's message
	// size bounds the whole request.
	MaxEntryBytes int
	// NearLimitRatio is the share of a limit past which a hit counts as
	// near the limit. Zero means 0.8, as in envoyproxy/ratelimit.
	NearLimitRatio float64
	// GiveBack, when set, returns the hits of a request's descriptors that
	// were granted when another of its descriptors refused it: each
	// descriptor is its own key, on its own cluster shard, taken in its
	// own atomic call, all at once (see docs/envoy.md). Nil means Store,
	// when it is a GiveBacker (memstore, redisstore, a pipeline), or the
	// redisstore under a stack that names one (a Redis method); for any
	// other Store, grants stay taken, as envoyproxy/ratelimit keeps them.
	GiveBack GiveBacker
	// OneKeyPerDomain keeps every descriptor of a domain under one key, as
	// sluice did before: one atomic call per cost takes a request's
	// descriptors all or nothing, and the whole domain lives on one Redis
	// Cluster shard. False, the default, keys each descriptor on its own,
	// unless there is nothing to give grants back with (see GiveBack).
	OneKeyPerDomain bool
	// ShadowMode answers OK to every request that is not malformed, as
	// envoyproxy/ratelimit's global SHADOW_MODE does: descriptors are
	// checked and taken as usual, and each overridden OVER_LIMIT is
	// counted (sluice_rls_global_shadow_mode_total).
	ShadowMode bool
}

// Service answers envoy.service.ratelimit.v3.RateLimitService requests from
// a RuleSource and a limit.Store. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store      limit.Store
	rules      RuleSource
	log        *slog.Logger
	metrics    *metrics
	timeout    time.Duration
	maxDescs   int
	maxEntries int
	maxBytes   int
	nearRatio  float64
	shadowAll  bool
	giver      GiveBacker // nil: grants are not given back
	oneKey     bool
	parallel   bool           // calls go to Redis: make a request's calls at once
	storeLog   rate.Sometimes // thins out store failure logs
	ignoreLog  rate.Sometimes // thins out ignored-field logs
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// GiveBacker returns the hits a take granted, to every limit of req:
// memstore and redisstore are GiveBackers. It must be safe for concurrent
// use.
type GiveBacker interface {
	GiveBack(ctx context.Context, req *limit.Request) error
}

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("rls: Config.Store is nil")
	}
	if cfg.Rules == nil {
		return nil, errors.New("rls: Config.Rules is nil")
	}
	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("rls: Config.Timeout %v is negative", cfg.Timeout)
	case cfg.MaxDescriptors < 0 || cfg.MaxEntryBytes < 0:
		return nil, fmt.Errorf("rls: Config.MaxDescriptors %d or MaxEntryBytes %d is negative", cfg.MaxDescriptors, cfg.MaxEntryBytes)
	case cfg.MaxEntries < 0 || cfg.MaxEntries > maxDepth:
		return nil, fmt.Errorf("rls: Config.MaxEntries %d: want 0 to %d", cfg.MaxEntries, maxDepth)
	case cfg.NearLimitRatio < 0 || cfg.NearLimitRatio >= 1:
		return nil, fmt.Errorf("rls: near-limit ratio %v: want at least 0 and below 1", cfg.NearLimitRatio)
	}
	s := &Service{
		store: cfg.Store, rules: cfg.Rules, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), timeout: cfg.Timeout,
		maxDescs: cmp.Or(cfg.MaxDescriptors, 64), maxEntries: cmp.Or(cfg.MaxEntries, maxDepth),
		maxBytes: cmp.Or(cfg.MaxEntryBytes, 1024), nearRatio: cmp.Or(cfg.NearLimitRatio, 0.8), shadowAll: cfg.ShadowMode,
		giver: cmp.Or(cfg.GiveBack, giverOf(cfg.Store)), oneKey: cfg.OneKeyPerDomain,
		storeLog: rate.Sometimes{Interval: time.Second}, ignoreLog: rate.Sometimes{Interval: time.Second},
	}
	// Without a way to give grants back, a domain stays one key, so that
	// a refused request still takes nothing.
	s.oneKey = s.oneKey || s.giver == nil
	// Calls to Redis wait for the network, so a request's go at once;
	// calls to memory take a microsecond, less than starting goroutines.
	_, s.parallel = s.giver.(*redisstore.Store)
	if st, ok := cfg.Store.(interface{ Redis() *redisstore.Store }); ok && st.Redis() != nil {
		s.parallel = true
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	return s, nil
}

// giverOf returns what gives back store's grants: store itself when it
// can (memstore, redisstore, and pipeline.Pipeline, which gives back
// through its region shares), else the Redis store under a decision stack,
// where its grants come from; nil when neither.
func giverOf(store limit.Store) GiveBacker {
	if g, ok := store.(GiveBacker); ok {
		return g
	}
	if st, ok := store.(interface{ Redis() *redisstore.Store }); ok {
		if r := st.Redis(); r != nil {
			return r
		}
	}
	return nil
}

// keyPrefix starts every store key of the service: "rls:", the domain,
// '/' and the descriptor's counter name (counterName), or under
// OneKeyPerDomain the domain alone. Gateway keys start "k:" or "ip:", so
// the two never share a bucket.
const keyPrefix = "rls:"

// descriptorLimit names the one limit of a descriptor's own key: the key
// already names the descriptor, so its stored state need not repeat it.
const descriptorLimit = "d"

// ShouldRateLimit implements RateLimitServiceServer. A malformed request
// gets INVALID_ARGUMENT, and one the store shed because this process is
// too busy (limit.FromShed) UNAVAILABLE; every other request an answer,
// with OVER_LIMIT only from a limit or a fail-closed limit the store
// cannot check.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	var src limit.Source
	resp, err := s.check(ctx, req, &src)
	s.metrics.observe(time.Since(start), resp, err, src)
	return resp, err
}

// item is one descriptor of a request.
type item struct {
	found // n nil: no limit applies (none matched, replaced, negative hits)
	cost  int64
	call  *call // the store call its limit is in; nil when none
	index int   // its limit's index in call.req.Limits
}

// call is one store call: one descriptor's counter (or, under
// Config.OneKeyPerDomain, the enforced descriptors of one cost, or the
// shadow ones).
type call struct {
	req    limit.Request
	shadow bool
	d      limit.Decision
	err    error
	failed int    // the limit that fails closed while the store failed, or -1
	given  bool   // its grant was given back: another call refused the request
	label  string // the descriptor's counter name, when its key is its own
}

// refused reports whether c's answer refuses the request: its limit
// refused, or the store failed under a fail-closed limit.
func (c *call) refused() bool {
	return c.failed >= 0 || c.err == nil && !c.d.Allowed
}

// calls are a request's store calls.
type calls []*call

// of returns the call for key, cost and group, adding it when there is none.
func (g *calls) of(key string, cost int64, shadow bool) *call {
	for _, c := range *g {
		if c.req.Cost == cost && c.shadow == shadow && c.req.Key == key {
			return c
		}
	}
	c := &call{req: limit.Request{Key: key, Cost: cost}, shadow: shadow, failed: -1}
	*g = append(*g, c)
	return c
}

// deciding is the enforced call whose answer stands for the request: the
// refusing one with the longest wait, else the answered one with the
// fewest hits left; nil when none.
func (g calls) deciding() *call {
	var best *call
	for _, c := range g {
		switch {
		case c.shadow:
		case c.refused():
			if best == nil || !best.refused() || waitsLonger(c.d.RetryAfter, best.d.RetryAfter) {
				best = c
			}
		case c.err == nil && (best == nil || !best.refused() && c.d.Remaining < best.d.Remaining):
			best = c
		}
	}
	return best
}

// waitsLonger reports whether retry a is a longer wait than b, Never the
// longest.
func waitsLonger(a, b time.Duration) bool {
	return b != limit.Never && (a == limit.Never || a > b)
}

// add puts the limit of it, named name, in c, once per counter.
func (c *call) add(it *item, name string) {
	it.call = c
	for i := range c.req.Limits {
		if c.req.Limits[i].Name == name {
			it.index = i
			return
		}
	}
	l := it.n.rule.limit
	l.Name = name
	it.index = len(c.req.Limits)
	c.req.Limits = append(c.req.Limits, l)
}

func (c *call) take(ctx context.Context, s *Service) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	c.d, c.err = s.store.Take(ctx, &c.req)
	if c.err == nil && !c.shadow && (c.d.Index < 0 || c.d.Index >= len(c.req.Limits)) {
		c.err = fmt.Errorf("store answered for limit %d of %d", c.d.Index, len(c.req.Limits))
	}
}

// run makes every call of g at once, each on its own goroutine but the
// last: calls to one Redis node leave together, pipelined, so a request
// costs one round trip per node its descriptors live on. Without Redis
// (s.parallel false) it makes them one after the other.
func (g calls) run(s *Service, each func(*call)) {
	var wg sync.WaitGroup
	for i, c := range g {
		if i == len(g)-1 || !s.parallel {
			each(c)
			continue
		}
		wg.Go(func() { each(c) })
	}
	wg.Wait()
}

// giveBack returns the grants of the enforced calls that were allowed when
// the request was refused (or shed), so that a refused request takes
// nothing: in parallel, one give-back per call. A grant the local fallback
// made is left: it took from this process's share, not from Redis.
func (s *Service) giveBack(ctx context.Context, domain string, g calls) {
	if s.giver == nil {
		return
	}
	var back calls
	for _, c := range g {
		if !c.shadow && c.err == nil && c.d.Allowed && givesBack(c.d.Source) {
			back = append(back, c)
		}
	}
	back.run(s, func(c *call) {
		gctx := ctx
		if s.timeout > 0 {
			var cancel context.CancelFunc
			gctx, cancel = context.WithTimeout(ctx, s.timeout)
			defer cancel()
		}
		if err := s.giver.GiveBack(gctx, &c.req); err != nil {
			s.storeLog.Do(func() {
				s.log.Warn("rls: could not give back a refused request's hits", "domain", domain, "error", err)
			})
			return
		}
		c.given = true
	})
	given := 0
	for _, c := range back {
		if c.given {
			given++
		}
	}
	if given > 0 {
		s.metrics.givenBack(given)
	}
}

// givesBack reports whether a grant from src took from the shared store
// (or this process's only store), where GiveBack returns it.
func givesBack(src limit.Source) bool {
	switch src {
	case limit.FromRedis, limit.FromMemory, limit.FromLease, limit.FromStore, "":
		return true
	}
	return false
}

// check answers one request, and sets *src to where the store's answer for
// its enforced descriptors came from (empty when it asked none).
func (s *Service) check(ctx context.Context, req *rlsv3.RateLimitRequest, src *limit.Source) (*rlsv3.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	descs := req.GetDescriptors()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	rules := s.rules.Current()
	if rules == nil {
		for i := range resp.Statuses {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		}
		return resp, nil
	}
	domain := req.GetDomain()
	items := make([]item, len(descs))
	var replaced []string
	for i, d := range descs {
		if d.GetIsNegativeHits() {
			s.ignoreLog.Do(func() {
				s.log.Warn("rls: ignoring a descriptor with is_negative_hits: sluice does not give tokens back", "domain", domain)
			})
			continue
		}
		if d.GetLimit() != nil {
			s.ignoreLog.Do(func() {
				s.log.Warn("rls: ignoring a descriptor's limit override: sluice limits by its configuration", "domain", domain)
			})
		}
		items[i].found = rules.match(domain, d.GetEntries())
		if n := items[i].n; n != nil {
			replaced = append(replaced, n.rule.replaces...)
		}
	}

	// Each descriptor's counter is a key of its own, so that a domain
	// spreads over a cluster's shards (Config.OneKeyPerDomain: one key per
	// domain, one call per cost).
	var g calls
	blocked := false // an enforced descriptor has requests_per_unit 0
	for i := range items {
		it := &items[i]
		if it.n == nil {
			continue
		}
		r := it.n.rule
		if r.name != "" && slices.Contains(replaced, r.name) {
			it.n = nil // replaced: neither evaluated nor changed
			continue
		}
		it.cost = s.cost(req, descs[i])
		if r.unlimited || r.blocked {
			blocked = blocked || r.blocked && !it.n.shadow
			continue
		}
		counter := counterName(it.named, it.shared)
		key, name := keyPrefix+domain+"/"+counter, descriptorLimit
		if s.oneKey {
			key, name = keyPrefix+domain, counter
		}
		c := g.of(key, it.cost, it.n.shadow)
		c.add(it, name)
		if !s.oneKey {
			c.label = counter
		}
	}
	// A request refused by a blocked descriptor takes from no other one.
	if blocked {
		g = slices.DeleteFunc(g, func(c *call) bool { return !c.shadow })
		for i := range items {
			if c := items[i].call; c != nil && !c.shadow {
				items[i].call = nil
			}
		}
	}
	// Every call at once; each is atomic, and a refusal by any gives back
	// what the others granted.
	var shedErr error // a call the store shed: the request is UNAVAILABLE
	g.run(s, func(c *call) { c.take(ctx, s) })
	refused := false
	for _, c := range g {
		if c.shadow {
			continue
		}
		if c.err != nil && c.d.Source == limit.FromShed {
			shedErr = c.err
			continue
		}
		if c.err != nil {
			c.failed = s.storeFailed(domain, c)
		}
		refused = refused || c.refused()
	}
	if refused || shedErr != nil {
		s.giveBack(ctx, domain, g)
	}

	if shedErr != nil {
		// Guessing locally would be a silent switch to local limits; Envoy's
		// failure_mode_deny decides what an unavailable service means.
		s.metrics.storeError()
		if c := g.deciding(); c != nil {
			*src = c.d.Source
		}
		return nil, status.Errorf(codes.Unavailable, "sluice is too busy to check this request in time: %v", shedErr)
	}
	for _, c := range g {
		if c.shadow && c.err != nil {
			s.storeLog.Do(func() { s.log.Warn("rls: store failed on shadow descriptors", "domain", domain, "error", c.err) })
		}
	}
	for i := range items {
		resp.Statuses[i] = s.status(domain, &items[i])
		if resp.Statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if c := g.deciding(); c != nil && c.err == nil {
		*src = c.d.Source
		d := &c.d
		l := c.req.Limits[d.Index]
		if c.label != "" {
			l.Name = c.label // the headers name the descriptor, not its key's one limit
		}
		b := limit.BudgetOf(&l, d)
		resp.ResponseHeadersToAdd = rateHeaders(&b)
		if !d.Allowed && d.RetryAfter == limit.Never {
			resp.RawBody = fmt.Appendf(nil, "this request costs %d hits, more than the %d that descriptor limit %q ever holds; it cannot pass\n",
				c.req.EffectiveCost(), l.EffectiveBurst(), l.Name)
		}
	} else if c != nil && c.failed >= 0 && c.d.RetryAfter > 0 {
		*src = c.d.Source
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(limit.RetryAfterSeconds(c.d.RetryAfter), 10)})
	}
	if s.shadowAll && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		s.metrics.globalShadow()
		resp.OverallCode, resp.RawBody = rlsv3.RateLimitResponse_OK, nil
		for _, st := range resp.Statuses {
			st.Code = rlsv3.RateLimitResponse_OK
		}
		resp.ResponseHeadersToAdd = slices.DeleteFunc(resp.ResponseHeadersToAdd, func(h *corev3.HeaderValue) bool { return h.GetKey() == "Retry-After" })
	}
	return resp, nil
}

// storeFailed decides a call the store could not answer: it passes,
// unless a limit fails closed; it returns that limit's index, or -1.
func (s *Service) storeFailed(domain string, c *call) int {
	s.metrics.storeError()
	i := c.req.FailClosed()
	if i >= 0 {
		s.storeLog.Do(func() {
			s.log.Warn("rls: store failed; refusing under a fail-closed limit", "domain", domain, "limit", c.req.Limits[i].Name, "error", c.err)
		})
		return i
	}
	s.storeLog.Do(func() { s.log.Warn("rls: store failed; letting the request through", "domain", domain, "error", c.err) })
	return -1
}

// status is the DescriptorStatus of one item: its own limit's answer
// (limit.Decision.Result), so that two descriptors over their limits are
// both OVER_LIMIT, as envoyproxy/ratelimit answers. A descriptor whose
// grant was given back reports its hits as they are, nothing taken. It
// also counts the item in the metrics.
func (s *Service) status(domain string, it *item) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if it.n == nil {
		return st
	}
	r := it.n.rule
	st.CurrentLimit = r.current
	it.metric = s.metrics.bound(domain, it.n.metric, it.metric)
	s.metrics.hit(domain, it.metric, it.cost)
	switch {
	case r.unlimited:
		st.LimitRemaining = math.MaxUint32
		return st
	case r.blocked:
		s.metrics.over(domain, it.metric, it.cost, it.n.shadow)
		if !it.n.shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		return st
	case it.call == nil:
		return st
	}
	c := it.call
	cost := it.cost
	if c.err != nil {
		if !it.n.shadow && it.index == c.failed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			s.metrics.over(domain, it.metric, cost, false)
		}
		return st
	}
	res, ok := c.d.Result(it.index)
	if !ok {
		// A layer's answer that speaks of another limit of the call alone
		// (one key per domain): the decided limit has the fewest left, a
		// lower bound for this one when the call was allowed.
		if c.d.Allowed {
			st.LimitRemaining = clampU32(c.d.Remaining)
		}
		return st
	}
	if c.given && res.Allowed {
		res.Remaining += cost
	}
	st.LimitRemaining = clampU32(res.Remaining)
	st.DurationUntilReset = durationpb.New(res.ResetAfter)
	if !res.Allowed {
		s.metrics.over(domain, it.metric, cost, it.n.shadow)
		if !it.n.shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		return st
	}
	l := &c.req.Limits[it.index]
	if q := l.EffectiveBurst(); float64(res.Remaining) < float64(q)*(1-s.nearRatio) {
		s.metrics.near(domain, it.metric, cost)
	}
	return st
}

// cost is a descriptor's hits: its own hits_addend when set, else the
// request's; zero counts as one, since sluice has no check-only call.
func (s *Service) cost(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int64 {
	n := uint64(req.GetHitsAddend())
	if h := d.GetHitsAddend(); h != nil {
		n = h.GetValue()
	}
	// Far above any burst Validate accepts, so still refused as Never.
	return int64(max(min(n, 1<<53), 1))
}

// validate refuses a request the service cannot answer, naming why.
func (s *Service) validate(req *rlsv3.RateLimitRequest) error {
	domain := req.GetDomain()
	switch descs := req.GetDescriptors(); {
	case domain == "":
		return errors.New("domain is empty")
	case len(domain) > 255:
		return fmt.Errorf("domain is %d bytes, more than 255", len(domain))
	case len(descs) == 0:
		return errors.New("request has no descriptors")
	case len(descs) > s.maxDescs:
		return fmt.Errorf("request has %d descriptors, more than %d", len(descs), s.maxDescs)
	}
	for i, d := range req.GetDescriptors() {
		es := d.GetEntries()
		if len(es) == 0 {
			return fmt.Errorf("descriptor %d has no entries", i)
		}
		if len(es) > s.maxEntries {
			return fmt.Errorf("descriptor %d has %d entries, more than %d", i, len(es), s.maxEntries)
		}
		for j, e := range es {
			switch {
			case e.GetKey() == "":
				return fmt.Errorf("descriptor %d entry %d has an empty key", i, j)
			case len(e.GetKey()) > s.maxBytes:
				return fmt.Errorf("descriptor %d entry %d: key is %d bytes, longer than %d", i, j, len(e.GetKey()), s.maxBytes)
			}
		}
	}
	return nil
}

// counterName is the limit name of a descriptor's counter: its entries as
// key=value joined by '/', each byte outside [A-Za-z0-9._~-] written %XX,
// so that distinct descriptors never share a name. The value of an entry
// marked in shared (bit i for entry i) is a share_threshold wildcard's
// pattern, its '*' kept as is, which escaping a request's value never
// produces. Names longer than a limit name may be (64 bytes) are '#' and
// the SHA-256 of that text, which '%'-escaping never produces either.
func counterName(entries []*ratelimitv3.RateLimitDescriptor_Entry, shared uint32) string {
	b := make([]byte, 0, 64)
	for i, e := range entries {
		if i > 0 {
			b = append(b, '/')
		}
		b = escape(b, e.GetKey(), false)
		b = append(b, '=')
		b = escape(b, e.GetValue(), shared&(1<<i) != 0)
	}
	if len(b) <= 64 {
		return string(b)
	}
	sum := sha256.Sum256(b)
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// escape appends s to b, each byte outside [A-Za-z0-9._~-] written %XX;
// with star, '*' is kept.
func escape(b []byte, s string, star bool) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-' || star && c == '*' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return b
}

func clampU32(n int64) uint32 {
	return uint32(max(min(n, math.MaxUint32), 0))
}
