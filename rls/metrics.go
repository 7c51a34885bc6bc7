package rls

import (
	"cmp"
	"fmt"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/limit"
)

// metrics are the Service's Prometheus collectors, shaped like
// envoyproxy/ratelimit's statistics
// ratelimit.service.rate_limit.DOMAIN.KEY_VALUE.STAT: one counter per STAT
// with the domain and the descriptor's KEY_VALUE path as labels. A nil
// *metrics counts nothing.
//
// A descriptor with detailed_metric names in its label each request's
// value, which a client chooses: at most MaxDetailedSeries values (the
// first seen) per configured descriptor and domain, the rest under its
// configured name with OverflowSuffix ("user_OVERFLOW").
type metrics struct {
	totalHits, overLimit, nearLimit, shadowMode *prometheus.CounterVec
	requests                                    *prometheus.CounterVec
	latency                                     prometheus.Histogram
	storeErrors, globalShadowMode, givenBacks   prometheus.Counter

	mu sync.Mutex
	// detailed holds, per domain and configured descriptor, the label
	// values its detailed_metric has made.
	detailed map[detailedKey]map[string]struct{}
}

// MaxDetailedSeries is the most descriptor label values one configured
// descriptor with detailed_metric makes in one domain (see metrics).
const MaxDetailedSeries = 100

// OverflowSuffix ends the label value that counts a detailed_metric
// descriptor's requests beyond MaxDetailedSeries values.
const OverflowSuffix = "_OVERFLOW"

type detailedKey struct{ domain, configured string }

// bound returns the descriptor label for metric, the name a request gave
// the configured descriptor named configured: metric itself, unless
// detailed_metric made it a value beyond MaxDetailedSeries, then the
// overflow label.
func (m *metrics) bound(domain, configured, metric string) string {
	if m == nil || metric == configured {
		return metric
	}
	k := detailedKey{domain, configured}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.detailed[k]
	if _, ok := seen[metric]; ok {
		return metric
	}
	if len(seen) >= MaxDetailedSeries {
		return configured + OverflowSuffix
	}
	if seen == nil {
		seen = map[string]struct{}{}
		m.detailed[k] = seen
	}
	seen[metric] = struct{}{}
	return metric
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	labels := []string{"domain", "descriptor"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "rls", Name: name, Help: help}, labels)
	}
	m := &metrics{
		totalHits:  counter("total_hits_total", "Hits (hits_addend) of requests whose descriptor matched a rate limit."),
		overLimit:  counter("over_limit_total", "Hits refused by the descriptor's limit (for shadow_mode descriptors: that would have been)."),
		nearLimit:  counter("near_limit_total", "Hits allowed with less than 1 - near-limit ratio (0.8) of the descriptor's limit left."),
		shadowMode: counter("shadow_mode_total", "Hits a shadow_mode descriptor let through that its limit would have refused."),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "rls", Name: "requests_total",
			Help: "ShouldRateLimit calls by answer (OK, OVER_LIMIT, INVALID_ARGUMENT for malformed requests, UNAVAILABLE when shed) " +
				"and by the source of the store's answer for the enforced descriptors (memory, redis, lease, refusal-cache, local-fallback, " +
				"fail-closed, shed; none when no store call was needed)."}, []string{"code", "source"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "sluice", Subsystem: "rls", Name: "check_duration_seconds",
			Help:    "Time to answer one ShouldRateLimit call, store calls included.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .00075, .001, .0015, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25, .5, 1}}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "rls", Name: "store_errors_total",
			Help: "Store calls that failed; the request then passed or, under a fail_mode closed limit, got OVER_LIMIT."}),
		globalShadowMode: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "rls", Name: "global_shadow_mode_total",
			Help: "Requests answered OK under --shadow-mode that would have been OVER_LIMIT."}),
		givenBacks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "rls", Name: "given_back_total",
			Help: "Descriptor grants given back because another descriptor of the same request refused it (each descriptor is its own key)."}),
		detailed: map[detailedKey]map[string]struct{}{},
	}
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.shadowMode, m.requests, m.latency, m.storeErrors, m.globalShadowMode, m.givenBacks} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) hit(domain, desc string, n int64) {
	if m != nil {
		m.totalHits.WithLabelValues(domain, desc).Add(float64(n))
	}
}

// over counts n refused hits, and for a shadow descriptor the hits it let
// through anyway.
func (m *metrics) over(domain, desc string, n int64, shadow bool) {
	if m != nil {
		m.overLimit.WithLabelValues(domain, desc).Add(float64(n))
		if shadow {
			m.shadowMode.WithLabelValues(domain, desc).Add(float64(n))
		}
	}
}

func (m *metrics) near(domain, desc string, n int64) {
	if m != nil {
		m.nearLimit.WithLabelValues(domain, desc).Add(float64(n))
	}
}

func (m *metrics) globalShadow() {
	if m != nil {
		m.globalShadowMode.Inc()
	}
}

func (m *metrics) givenBack(n int) {
	if m != nil {
		m.givenBacks.Add(float64(n))
	}
}

func (m *metrics) storeError() {
	if m != nil {
		m.storeErrors.Inc()
	}
}

func (m *metrics) observe(d time.Duration, resp *rlsv3.RateLimitResponse, err error, src limit.Source) {
	if m == nil {
		return
	}
	m.latency.Observe(d.Seconds())
	code := resp.GetOverallCode().String()
	switch status.Code(err) {
	case codes.OK:
	case codes.InvalidArgument:
		code = "INVALID_ARGUMENT"
	case codes.Unavailable:
		code = "UNAVAILABLE"
	default:
		code = status.Code(err).String()
	}
	m.requests.WithLabelValues(code, string(cmp.Or(src, "none"))).Inc()
}
