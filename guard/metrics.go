package guard

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limit"
)

// metrics are the guard's Prometheus collectors. A nil *metrics counts
// nothing. The series a decision or a failed call counts are bound once
// (the fallback's here, each shard's in its shardMetrics), so counting
// costs an atomic add and no label lookup.
type metrics struct {
	state     *prometheus.GaugeVec
	opened    *prometheus.CounterVec
	timeouts  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	shedded   prometheus.Counter
	queue     prometheus.Histogram

	localAllowed, localRefused, failClosed prometheus.Counter // fallbacks, by source and outcome
}

// shardMetrics are one shard's failure series; nil counters count nothing.
type shardMetrics struct {
	errors, timeouts prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "sluice", Subsystem: "guard", Name: name, Help: help}
	}
	m := &metrics{
		state:     prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("breaker_state", "Circuit breaker state per shared-store shard: 0 closed, 1 half-open (probing), 2 open (limits enforced locally).")), []string{"shard"}),
		opened:    prometheus.NewCounterVec(opts("breaker_opened_total", "Times a shard's breaker opened after consecutive failures or a failed probe."), []string{"shard"}),
		timeouts:  prometheus.NewCounterVec(opts("store_timeouts_total", "Shared-store calls that ran past the guard's deadline, per shard."), []string{"shard"}),
		errors:    prometheus.NewCounterVec(opts("store_failures_total", "Shared-store calls that failed for any reason (timeouts included), per shard."), []string{"shard"}),
		fallbacks: prometheus.NewCounterVec(opts("fallback_decisions_total", "Decisions made without the shared store: source local-fallback (allowed or refused by the gateway's own share of the limit) or fail-closed (refused)."), []string{"source", "outcome"}),
		shedded:   prometheus.NewCounter(opts("shed_total", "Requests dropped (503, source shed) because this process could not get the shared store's answer within the deadline plus the max queue time, while the store was answering: the process is overloaded.")),
		queue: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "guard", Name: "queued_call_duration_seconds",
			Help:    "How long shared-store calls took that ran past the deadline while their node was answering: time spent queued in this process, not in the store.",
			Buckets: []float64{0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
	}
	for _, c := range []prometheus.Collector{m.state, m.opened, m.timeouts, m.errors, m.fallbacks, m.shedded, m.queue} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("guard: register metrics: %w", err)
		}
	}
	// The fallback labels are a small fixed set: make each series exist at
	// zero so that rate() over them has data on a healthy fleet.
	m.localAllowed = m.fallbacks.WithLabelValues(string(limit.FromLocalFallback), "allowed")
	m.localRefused = m.fallbacks.WithLabelValues(string(limit.FromLocalFallback), "refused")
	m.failClosed = m.fallbacks.WithLabelValues(string(limit.FromFailClosed), "refused")
	return m, nil
}

// known makes shard's series exist, at zero unless already counted, and
// returns its failure counters.
func (m *metrics) known(shard string) shardMetrics {
	if m == nil {
		return shardMetrics{}
	}
	m.state.WithLabelValues(shard)
	m.opened.WithLabelValues(shard)
	return shardMetrics{errors: m.errors.WithLabelValues(shard), timeouts: m.timeouts.WithLabelValues(shard)}
}

func (m *metrics) transition(shard string, to State) {
	if m == nil {
		return
	}
	m.state.WithLabelValues(shard).Set(float64(to))
	if to == Open {
		m.opened.WithLabelValues(shard).Inc()
	}
}

func (sm shardMetrics) failure(timeout bool) {
	if sm.errors == nil {
		return
	}
	sm.errors.Inc()
	if timeout {
		sm.timeouts.Inc()
	}
}

func (m *metrics) shed() {
	if m != nil {
		m.shedded.Inc()
	}
}

func (m *metrics) queued(d time.Duration) {
	if m != nil {
		m.queue.Observe(d.Seconds())
	}
}

// fallback counts a local answer: allowed or refused by the local
// fallback, or refused because a limit fails closed.
func (m *metrics) fallback(failClosed, allowed bool) {
	switch {
	case m == nil:
	case failClosed:
		m.failClosed.Inc()
	case allowed:
		m.localAllowed.Inc()
	default:
		m.localRefused.Inc()
	}
}
