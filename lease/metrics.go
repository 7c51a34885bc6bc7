package lease

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limit"
)

// metrics are the lease store's Prometheus collectors. A nil *metrics
// counts nothing. Each label's counter is bound once, in newMetrics, so a
// request pays an atomic add and no label lookup.
type metrics struct {
	memory  *prometheus.CounterVec
	calls   *prometheus.CounterVec
	dropped prometheus.Counter

	fromLease, fromRefusals prometheus.Counter // memory, by source
	single, batch, refill   prometheus.Counter // calls, by kind
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "sluice", Subsystem: "lease", Name: name, Help: help}
	}
	m := &metrics{
		memory:  prometheus.NewCounterVec(opts("memory_decisions_total", "Decisions made from memory without calling the store: source lease (a leased token spent) or refusal-cache (a remembered refusal)."), []string{"source"}),
		calls:   prometheus.NewCounterVec(opts("store_calls_total", "Calls to the guarded store: kind single (a request's own tokens), batch (a request's tokens and a lease), refill (a lease, in the background)."), []string{"kind"}),
		dropped: prometheus.NewCounter(opts("tokens_expired_total", "Leased tokens dropped unspent when their lease expired: the limiter's only error with leases, always under the limit.")),
	}
	for _, c := range []prometheus.Collector{m.memory, m.calls, m.dropped} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("lease: register metrics: %w", err)
		}
	}
	m.fromLease = m.memory.WithLabelValues(string(limit.FromLease))
	m.fromRefusals = m.memory.WithLabelValues(string(limit.FromRefusalCache))
	m.single = m.calls.WithLabelValues("single")
	m.batch = m.calls.WithLabelValues("batch")
	m.refill = m.calls.WithLabelValues("refill")
	return m, nil
}

func (m *metrics) served(src limit.Source, dropped int64) {
	if m == nil {
		return
	}
	if src == limit.FromLease {
		m.fromLease.Inc()
	} else {
		m.fromRefusals.Inc()
	}
	m.drop(dropped)
}

func (m *metrics) asked(batch bool, dropped int64) {
	if m == nil {
		return
	}
	if batch {
		m.batch.Inc()
	} else {
		m.single.Inc()
	}
	m.drop(dropped)
}

func (m *metrics) refilling() {
	if m != nil {
		m.refill.Inc()
	}
}

func (m *metrics) drop(n int64) {
	if n > 0 {
		m.dropped.Add(float64(n))
	}
}
