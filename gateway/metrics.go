package gateway

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// Outcomes counted by the decisions metric.
const (
	outcomeAllowed       = "allowed"
	outcomeRefused       = "refused"
	outcomeShadowAllowed = "shadow_allowed"
	outcomeShadowRefused = "shadow_refused"
	outcomeError         = "error"
)

// metrics are the Limiter's Prometheus collectors. A nil *metrics counts
// nothing, so a Limiter without a Registerer pays nothing for them.
type metrics struct {
	decisions   *prometheus.CounterVec
	latency     prometheus.Histogram
	storeErrors prometheus.Counter
	settles     *prometheus.CounterVec
	plans       atomic.Pointer[planNames] // of the rule set last seen; see plan
}

// Values of the decisions metric's plan label besides the plans the rules
// name. Keys come and go by the million and the key directory may name any
// plan, so only plans that a rule limits get a series of their own: the
// label's values are bounded by the rules, not by the traffic.
const (
	planNone  = "none"  // a request without a known API key
	planOther = "other" // a key whose plan no rule names
)

// planNames are the plans a rule set's rules name.
type planNames struct {
	set   *rules.Set
	names map[string]bool
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "decisions_total",
			Help: "Rate limit decisions by outcome (allowed, refused, shadow_allowed, shadow_refused, error), the limit that decided (the tightest one when allowed), the source that answered (memory, redis, lease, refusal-cache, local-fallback, fail-closed, shed, store) and the caller's plan (a plan a rule names, other, or none for requests without a known key).",
		}, []string{"outcome", "limit", "source", "plan"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "check_duration_seconds",
			Help: "Time the limiter adds to a request: identity, rule resolution and the store call.",
			// Fine-grained below 5 ms, where the promise of adding under
			// 1 ms (p99 under 2 ms) is kept or broken.
			Buckets: []float64{.00005, .0001, .00025, .0005, .00075, .001, .0015, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25, .5, 1},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "store_errors_total",
			Help: "Store calls that failed; the request then failed open or, under a fail_mode closed limit, got 503.",
		}),
		settles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "gateway", Name: "settles_total",
			Help: "Responses of endpoints with a cost header, by how their cost was settled: exact (the estimate was right), took (the rest taken), debt (taken, leaving the key in debt), gave_back (the unused part given back), missing (no or a bad cost header: the estimate stands), error (the store failed: the estimate stands).",
		}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.storeErrors, m.settles} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) decision(outcome, limitName string, src limit.Source, plan string) {
	if m != nil {
		m.decisions.WithLabelValues(outcome, limitName, string(src), plan).Inc()
	}
}

// plan returns the plan label of a request resolved against set to plan
// (empty for no known key): plan itself if a rule of set names it, else
// planOther, or planNone. The names are gathered once per rule set.
func (m *metrics) plan(set *rules.Set, plan string) string {
	if m == nil {
		return ""
	}
	if plan == "" {
		return planNone
	}
	p := m.plans.Load()
	if p == nil || p.set != set {
		p = &planNames{set: set, names: map[string]bool{}}
		for _, r := range set.Document().Rules {
			if r.Match.Plan != "" {
				p.names[r.Match.Plan] = true
			}
		}
		m.plans.Store(p)
	}
	if p.names[plan] {
		return plan
	}
	return planOther
}

func (m *metrics) storeError() {
	if m != nil {
		m.storeErrors.Inc()
	}
}

func (m *metrics) observe(d time.Duration) {
	if m != nil {
		m.latency.Observe(d.Seconds())
	}
}

func (m *metrics) settled(outcome string) {
	if m != nil {
		m.settles.WithLabelValues(outcome).Inc()
	}
}
