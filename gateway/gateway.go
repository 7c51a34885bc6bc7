package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

// RuleSource hands out the rule set in force. Current is called once per
// request and must be cheap and safe for concurrent use; it may return nil
// while no rule set is known yet, and then requests pass unlimited.
type RuleSource interface {
	Current() *rules.Set
}

// StaticRules returns a RuleSource that always answers s.
func StaticRules(s *rules.Set) RuleSource { return staticRules{s} }

type staticRules struct{ s *rules.Set }

func (r staticRules) Current() *rules.Set { return r.s }

// Config configures a Limiter. The zero value is valid except for Rules.
type Config struct {
	// Store keeps the buckets. Nil means a new in-process store
	// (memstore) reading time from Now. pipeline.New builds the production
	// stack over Redis (leases, deadlines, breakers, local fallbacks); the
	// Limiter only calls Take, and reports each Decision's Source.
	Store limit.Store
	// Rules supplies the rule set for each request. Required; use
	// StaticRules for a fixed set.
	Rules RuleSource
	// TrustedProxies are the networks of proxies in front of the gateway.
	// Only a request whose TCP peer is inside one of them has its
	// X-Forwarded-For read. Nil trusts nobody.
	TrustedProxies []netip.Prefix
	// UnknownKeysAsAddress limits a request whose API key is not in the
	// rules' key directory as its client address, as if it had sent no
	// key. The Limiter does not authenticate keys: by default every key is
	// a caller of its own, so a client that invents a new key for each
	// request gets a fresh default bucket each time unless the upstream
	// refuses unknown keys. Set it when the directory lists every valid
	// key; a key then found only in a key-scope rule is an address too.
	UnknownKeysAsAddress bool
	// Logger receives the decision log (refusals, local-fallback answers
	// and store errors, at most one line per key a second), and shadow
	// refusals. Nil discards.
	Logger *slog.Logger
	// Registerer receives the Limiter's metrics. Nil registers none.
	Registerer prometheus.Registerer
	// Now returns the time rules are resolved at (for expires_at) and, for
	// the default store, the time buckets refill by. Nil means time.Now.
	Now func() time.Time
	// Timeout bounds each store call. Zero means no bound beyond the
	// request's own context.
	Timeout time.Duration
	// Settle settles the cost of a request to an endpoint with a cost
	// header (rules.Endpoint.CostHeader) once its response has ended. Nil
	// means Store, if it is a Settler; without one, cost headers are
	// stripped from responses and the estimate stands. Only Middleware
	// settles: Check alone cannot see the response.
	Settle Settler
	// OnDecision, if set, is called after every store call: once for the
	// request's enforced limits and, when it has shadow limits, once more
	// for them (Event.Shadow), both from the request's one store call. It
	// must not block and must not keep the Event's slices.
	OnDecision func(Event)
}

// Event describes one store call of one request, for OnDecision.
type Event struct {
	// Request is the request being limited.
	Request *http.Request
	// Key is the caller's store key: "k:" and the API key, or "ip:" and
	// the client address; shadow limits are under the same key. A request
	// org rules apply to is taken under its org's key
	// (rules.Resolution.StoreKey), but reported under the caller's.
	Key string
	// Endpoint is the matched endpoint's name, empty when none matched.
	Endpoint string
	// Shadow is true for the check of shadow-mode limits: Limits and Rules
	// are the shadow ones, and Decision says what they would have done
	// (its Index a position in Limits). Duration is zero: it is the
	// enforced event's call.
	Shadow bool
	// Limits are the limits checked, and Rules the rules they came from.
	Limits []limit.Limit
	Rules  []*rules.Rule
	// Cost is the tokens the request asked for.
	Cost int64
	// Decision is the store's answer; meaningless when Err is set.
	Decision limit.Decision
	// Err is the store's error.
	Err error
	// Duration is how long the store call took.
	Duration time.Duration
	// Source is the path that answered, as the store's Decision says (see
	// the package doc); limit.FromStore when the store did not say. Never
	// empty.
	Source limit.Source
	// RulesVersion is the Version of the rule set the request was resolved
	// against, which may no longer be the one in force when the call ends.
	RulesVersion int64
}

// Limiter is rate-limiting middleware. It is safe for concurrent use; the
// rule source and store it was given are shared by every request.
type Limiter struct {
	store                limit.Store
	sampled              *sampler // thins out the decision log
	rules                RuleSource
	trustedProxies       []netip.Prefix
	unknownKeysAsAddress bool
	log                  *slog.Logger
	metrics              *metrics
	now                  func() time.Time
	timeout              time.Duration
	onDecision           func(Event)
	settler              Settler
}

// New returns a Limiter for cfg.
func New(cfg Config) (*Limiter, error) {
	if cfg.Rules == nil {
		return nil, errors.New("gateway: Config.Rules is nil; use StaticRules for a fixed rule set")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("gateway: Config.Timeout %v is negative", cfg.Timeout)
	}
	l := &Limiter{
		store: cfg.Store, rules: cfg.Rules, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), now: cfg.Now,
		timeout: cfg.Timeout, onDecision: cfg.OnDecision, unknownKeysAsAddress: cfg.UnknownKeysAsAddress,
		sampled: newSampler(logEvery),
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.store == nil {
		l.store = memstore.New(memstore.Config{Now: l.now})
	}
	st, _ := l.store.(Settler)
	l.settler = cmp.Or(cfg.Settle, st)
	for i, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("gateway: Config.TrustedProxies[%d] is not a valid prefix", i)
		}
		// Client addresses are unmapped before the check, so unmap the
		// networks too.
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		l.trustedProxies = append(l.trustedProxies, p.Masked())
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	l.metrics = m
	return l, nil
}

// Middleware returns a handler that limits each request and passes the
// allowed ones to next. Refused requests get 429, requests with an
// unusable API key 400, and requests under a fail_mode closed limit while
// the store is failing 503, each with a problem document.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var p pending
		err := l.check(w, r, &p)
		l.metrics.observe(time.Since(start))
		if err != nil {
			WriteError(w, err)
			return
		}
		// A concurrency slot is held until the response ends: success,
		// upstream error, client gone or panic (gateway/concurrency.go).
		slots, err := l.hold(w, &p)
		if err != nil {
			WriteError(w, err)
			return
		}
		defer slots.release()
		if p.header == "" {
			next.ServeHTTP(w, r)
			return
		}
		l.serveAndSettle(w, r, next, &p)
	})
}

// Check limits one request. It sets the caller's rate limit headers on w
// and returns nil if the request may pass, or an *Error to answer with.
// Middleware is Check followed by WriteError or the next handler.
func (l *Limiter) Check(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	err := l.check(w, r, nil)
	l.metrics.observe(time.Since(start))
	return err
}

// requests recycles the limit.Request of each check: a store takes it by
// pointer, so it would otherwise be allocated on every request.
var requests = sync.Pool{New: func() any { return new(pooledRequest) }}

// pooledRequest is a check's limit.Request, and the memory its limits are
// joined in when the request has shadow limits.
type pooledRequest struct {
	req    limit.Request
	limits []limit.Limit
}

// check limits one request; when p is not nil and the request passes to
// an endpoint with a cost header, it fills p for the settle.
func (l *Limiter) check(w http.ResponseWriter, r *http.Request, p *pending) error {
	set := l.rules.Current()
	if set == nil {
		return nil
	}
	c, err := l.identify(r, set)
	if err != nil {
		return err
	}
	ep, _, err := set.MatchEndpoint(r.Method, r.URL.Path)
	if err != nil {
		// Another spelling of an endpoint's path: refused, so that it
		// cannot slip past the endpoint's cost and limits (rules.PathError
		// names the path to send).
		return newError(http.StatusBadRequest, err.Error(), nil)
	}
	res := set.Resolve(l.now(), rules.Query{APIKey: c.apiKey, Endpoint: ep.Name, LookedUp: true, Info: c.info, Known: c.known})
	cl := call{r: r, caller: c, endpoint: ep.Name, version: set.Version, plan: l.metrics.plan(set, res.Plan)}
	if p != nil {
		p.cl, p.conc = cl, res.Concurrency
		// Stripped from the response whatever happens; settled only when
		// the store took the estimate (below).
		p.header = res.CostHeader
	}

	if len(res.Limits) == 0 && len(res.Shadow) == 0 {
		l.unlimited(cl)
		return l.takeQuotas(w, cl, &res)
	}
	pr := requests.Get().(*pooledRequest)
	req := &pr.req
	*req = limit.Request{Key: c.key, Cost: res.Cost, Limits: res.Limits}
	if res.Org != "" {
		// Org rules: the key's and the org's limits in one call under the
		// org's key (rules.Resolution.StoreKey), in res's order.
		req.Key, pr.limits = res.StoreKey(c.key), res.AppendStoreLimits(pr.limits[:0], c.apiKey)
		req.Limits = pr.limits
	} else if len(res.Shadow) > 0 {
		// One store call for both: the shadow limits (Limit.Shadow) follow
		// the enforced ones under the same key, so that Decision.Index is
		// still a position in res.Limits, and Decision.Shadow says what
		// the shadow limits would have done.
		pr.limits = append(append(pr.limits[:0], res.Limits...), res.Shadow...)
		req.Limits = pr.limits
	}
	defer func() {
		*req = limit.Request{}
		clear(pr.limits)
		requests.Put(pr)
	}()
	d, src, err := l.take(cl, req, &res)
	if len(res.Shadow) > 0 {
		l.shadow(cl, &res, &d, src, err)
	}
	if len(res.Limits) == 0 {
		l.unlimited(cl)
		return l.takeQuotas(w, cl, &res)
	}
	if err != nil {
		return l.storeFailed(w, cl, req, &d, res.Rules, src, err)
	}
	lim := &res.Limits[d.Index]
	b := limit.BudgetOf(lim, &d)
	SetRateHeaders(w.Header(), &b)
	if d.Allowed {
		if p != nil && res.CostHeader != "" {
			p.key, p.limits, p.estimate = req.Key, res.Limits, req.EffectiveCost()
			if res.Org != "" {
				// The org's store limits, renamed per key, live in the
				// pooled request: copied, since it is reused once check
				// returns.
				p.limits = slices.Clone(req.Limits[:len(res.Limits)])
			}
		}
		l.metrics.decision(outcomeAllowed, lim.Name, src, cl.plan)
		if src == limit.FromLocalFallback {
			l.logDecision(cl, slog.LevelInfo, "rate limit decision",
				logLine{outcome: outcomeAllowed, limit: lim, rule: ruleAt(res.Rules, d.Index), source: src})
		}
		return l.takeQuotas(w, cl, &res)
	}
	l.metrics.decision(outcomeRefused, lim.Name, src, cl.plan)
	l.logDecision(cl, slog.LevelInfo, "rate limit decision", logLine{outcome: outcomeRefused, limit: lim,
		rule: ruleAt(res.Rules, d.Index), source: src, wait: b.RetryAfter, checked: res.Limits})
	e := refusal(lim, &d, b.RetryAfter, req.EffectiveCost())
	nameRule(e, &res, &d, cl.version)
	return e
}

// call is what the store calls of one request share.
type call struct {
	r        *http.Request
	caller   caller
	endpoint string
	version  int64  // of the rule set the request was resolved against
	plan     string // the metrics' plan label
}

// unlimited reports a request no enforced limit applies to. It is counted
// too, so that a rules change that starts limiting such traffic can be
// compared against it (the canary check).
func (l *Limiter) unlimited(cl call) {
	if l.onDecision != nil {
		l.onDecision(Event{Request: cl.r, Key: cl.caller.key, Endpoint: cl.endpoint, Decision: limit.Decision{Allowed: true},
			Source: limit.Unlimited, RulesVersion: cl.version})
	}
}

// take asks the store, under the configured timeout, and reports the call
// of the enforced limits of res to OnDecision (the shadow ones are
// reported by shadow).
func (l *Limiter) take(cl call, req *limit.Request, res *rules.Resolution) (limit.Decision, limit.Source, error) {
	ctx := cl.r.Context()
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	start := time.Now()
	d, err := l.store.Take(ctx, req)
	took := time.Since(start)
	src := cmp.Or(d.Source, limit.FromStore)
	if n := len(res.Limits); err == nil && n > 0 && (d.Index < 0 || d.Index >= n) {
		err = fmt.Errorf("store answered for limit %d of %d", d.Index, n)
	}
	if l.onDecision != nil && len(res.Limits) > 0 {
		l.onDecision(Event{Request: cl.r, Key: cl.caller.key, Endpoint: cl.endpoint, Limits: res.Limits,
			Rules: res.Rules, Cost: req.EffectiveCost(), Decision: d, Err: err, Duration: took,
			Source: src, RulesVersion: cl.version})
	}
	return d, src, err
}

// storeFailed decides a request the store could not: it passes, unless one
// of its limits (from rules rs) must fail closed. A fail-closed refusal the
// store chose itself (limit.FromFailClosed: the guard while Redis is down)
// is a decision, logged at info, with the guard's next probe as the 503's
// Retry-After. A shed request (limit.FromShed) gets 503 whatever its
// limits: passing it would hand the overload on, and guessing would be a
// silent switch to local limits.
func (l *Limiter) storeFailed(w http.ResponseWriter, cl call, req *limit.Request, d *limit.Decision, rs []*rules.Rule, src limit.Source, err error) error {
	l.metrics.storeError()
	l.metrics.decision(outcomeError, "", src, cl.plan)
	if src == limit.FromShed {
		l.logDecision(cl, slog.LevelWarn, "gateway overloaded; request shed",
			logLine{outcome: outcomeError, source: src, err: err})
		e := newError(http.StatusServiceUnavailable, "the gateway is overloaded and could not check this request's rate limits in time", err)
		wait := max(d.RetryAfter, time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(limit.RetryAfterSeconds(wait), 10))
		e.Problem.RetryAfterMillis = wait.Milliseconds()
		return e
	}
	if i := req.FailClosed(); i >= 0 {
		lim := &req.Limits[i]
		level := slog.LevelError
		if src == limit.FromFailClosed {
			level = slog.LevelInfo
		}
		l.logDecision(cl, level, "rate limit store failed; refusing under a fail-closed limit",
			logLine{outcome: outcomeError, limit: lim, rule: ruleAt(rs, i), source: src, err: err})
		e := newError(http.StatusServiceUnavailable,
			fmt.Sprintf("the rate limit store is unavailable and limit %q does not let requests through without it", lim.Name), err)
		e.Problem.Limit = lim.Name
		if src == limit.FromFailClosed && d.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(limit.RetryAfterSeconds(d.RetryAfter), 10))
			e.Problem.RetryAfterMillis = max(d.RetryAfter.Milliseconds(), 1)
		}
		return e
	}
	l.logDecision(cl, slog.LevelWarn, "rate limit store failed; letting the request through",
		logLine{outcome: outcomeError, source: src, err: err})
	return nil
}

// logLine is what one line of the decision log says beyond the request.
type logLine struct {
	outcome string
	limit   *limit.Limit  // the limit that decided; nil when none did
	rule    *rules.Rule   // the rule it came from; nil when unknown
	source  limit.Source  // the path that answered
	wait    time.Duration // a refusal's retry time
	err     error         // the store's, for a failure
	checked []limit.Limit // every enforced limit of a refused request
}

// logDecision writes one line of the decision log, unless the caller's key
// had one less than logEvery ago. The key is written as keyhash.Of writes it,
// never as it came.
func (l *Limiter) logDecision(cl call, level slog.Level, msg string, line logLine) {
	ctx := cl.r.Context()
	if !l.log.Enabled(ctx, level) || !l.sampled.allow(cl.caller.key, l.now().UnixMilli()) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs, slog.String("key", keyhash.Of(cl.caller.key)), slog.String("outcome", line.outcome))
	if line.limit != nil {
		attrs = append(attrs, slog.String("limit", line.limit.Name))
	}
	if line.rule != nil {
		attrs = append(attrs, slog.Any("rule", ruleAttrs(line.rule, true)))
	}
	if cl.endpoint != "" {
		attrs = append(attrs, slog.String("endpoint", cl.endpoint))
	}
	attrs = append(attrs, slog.String("source", string(line.source)), slog.Int64("rules_version", cl.version))
	if line.outcome == outcomeRefused {
		attrs = append(attrs, slog.Int64("retry_after_ms", line.wait.Milliseconds()))
	}
	if len(line.checked) > 1 {
		attrs = append(attrs, slog.Any("limits", limitNames(line.checked)))
	}
	if line.err != nil {
		attrs = append(attrs, slog.Any("error", line.err))
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}

// ruleAt is rs[i], or nil when rs does not reach i.
func ruleAt(rs []*rules.Rule, i int) *rules.Rule {
	if i < 0 || i >= len(rs) {
		return nil
	}
	return rs[i]
}

// shadow reports what the shadow-mode limits of res would have done, as
// the store's answer d to the request's one call says (Decision.Shadow):
// the metric, the sampled log line and OnDecision. It never refuses.
func (l *Limiter) shadow(cl call, res *rules.Resolution, d *limit.Decision, src limit.Source, err error) {
	r := cl.r
	v := d.Shadow
	n := len(res.Limits) // shadow limits follow the enforced ones
	if err == nil && (!v.Checked || v.Index < n || v.Index >= n+len(res.Shadow)) {
		err = fmt.Errorf("store did not check the shadow limits (verdict %+v for %d enforced and %d shadow limits)", v, n, len(res.Shadow))
	}
	sd := limit.Decision{Allowed: v.Allowed, Index: v.Index - n, Remaining: v.Remaining, RetryAfter: v.RetryAfter, Source: d.Source}
	if l.onDecision != nil {
		l.onDecision(Event{Request: r, Key: cl.caller.key, Endpoint: cl.endpoint, Shadow: true, Limits: res.Shadow,
			Rules: res.ShadowRules, Cost: res.Cost, Decision: sd, Err: err, Source: src, RulesVersion: cl.version})
	}
	if err != nil {
		if n == 0 {
			// The request's only store call: its failure is counted here.
			l.metrics.storeError()
			l.log.LogAttrs(r.Context(), slog.LevelWarn, "rate limit store failed on shadow limits", slog.Any("error", err))
		}
		return
	}
	lim := &res.Shadow[sd.Index]
	if sd.Allowed {
		l.metrics.decision(outcomeShadowAllowed, lim.Name, src, cl.plan)
		return
	}
	l.metrics.decision(outcomeShadowRefused, lim.Name, src, cl.plan)
	l.logShadow(cl, lim, ruleAt(res.ShadowRules, sd.Index),
		slog.Int64("retry_after_ms", limit.BudgetOf(lim, &sd).RetryAfter.Milliseconds()))
}

// logShadow writes the log line of a request shadow limit lim of rule
// would have refused, with attrs added. It is sampled like the decision
// log, on a key of its own so that a shadow line and an enforced one of
// the same caller do not silence each other.
func (l *Limiter) logShadow(cl call, lim *limit.Limit, rule *rules.Rule, attrs ...slog.Attr) {
	r := cl.r
	if !l.log.Enabled(r.Context(), slog.LevelInfo) || !l.sampled.allow(shadowLogPrefix+cl.caller.key, l.now().UnixMilli()) {
		return
	}
	attrs = append([]slog.Attr{
		slog.String("key", keyhash.Of(cl.caller.key)), slog.String("limit", lim.Name), slog.String("endpoint", cl.endpoint),
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
	}, attrs...)
	if rule != nil {
		attrs = append(attrs, slog.Any("rule", ruleAttrs(rule, true)))
	}
	l.log.LogAttrs(r.Context(), slog.LevelInfo, "shadow rule would refuse", attrs...)
}

// shadowRefused reports a request that a shadow quota or concurrency
// limit (kind), described as lim, of rule would have refused, as shadow
// reports a rate limit's (so the rules service counts it by rule): the
// metric, the sampled log line and an OnDecision event. It still passes.
func (l *Limiter) shadowRefused(cl call, lim limit.Limit, rule *rules.Rule, src limit.Source, kind string, cost int64) {
	l.metrics.decision(outcomeShadowRefused, lim.Name, src, cl.plan)
	if l.onDecision != nil {
		l.onDecision(Event{Request: cl.r, Key: cl.caller.key, Endpoint: cl.endpoint, Shadow: true,
			Limits: []limit.Limit{lim}, Rules: []*rules.Rule{rule}, Cost: cost,
			Decision: limit.Decision{Index: 0, Source: src}, Source: src, RulesVersion: cl.version})
	}
	l.logShadow(cl, &lim, rule, slog.String("kind", kind))
}

// refusal is the 429 for a request limit l refused, to retry after wait
// (limit.Budget.RetryAfter).
func refusal(l *limit.Limit, d *limit.Decision, wait time.Duration, cost int64) *Error {
	detail := fmt.Sprintf("limit %q (%d per %v) is used up; retry in %d ms",
		l.Name, l.Count, rules.Duration(l.Period), max(wait.Milliseconds(), 1))
	if d.RetryAfter == limit.Never {
		detail = fmt.Sprintf("this request costs %d tokens, more than the %d that limit %q ever holds; it cannot pass",
			cost, l.EffectiveBurst(), l.Name)
	}
	return &Error{Problem: Problem{
		Type: QuotaExceeded, Title: "Too Many Requests: quota exceeded", Status: http.StatusTooManyRequests,
		Detail: detail, Limit: l.Name, ViolatedPolicies: []string{l.Name},
		RetryAfterMillis: max(wait.Milliseconds(), 1),
	}}
}
