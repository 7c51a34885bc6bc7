package relay

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics are the relay's collectors. A nil *serverMetrics counts
// nothing. The Redis calls it makes are the lease store's
// (sluice_lease_store_calls_total), registered beside these.
type serverMetrics struct {
	requests *prometheus.CounterVec
	latency  prometheus.Histogram
	tokens   prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer, held func() (int, int64)) (*serverMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "relay", Name: "requests_total",
			Help: "Lease requests the relay answered, by HTTP status code; each carries up to 256 takes.",
		}, []string{"code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "relay", Name: "sublease_seconds",
			Help:    "Time to answer one take: from memory for a busy key, a Redis call for a quiet one or a new batch.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1},
		}),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "relay", Name: "tokens_granted_total",
			Help: "Tokens the relay handed to gateways in sub-leases.",
		}),
	}
	cs := []prometheus.Collector{m.requests, m.latency, m.tokens}
	if held != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "sluice", Subsystem: "relay", Name: "leases_held",
				Help: "Keys the relay holds a lease entry for (busy keys, and remembered refusals).",
			}, func() float64 { n, _ := held(); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "sluice", Subsystem: "relay", Name: "tokens_in_flight",
				Help: "Tokens taken from Redis that the relay holds and has not yet handed out: what is lost, under the limit, if it dies.",
			}, func() float64 { _, t := held(); return float64(t) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("relay: register metrics: %w", err)
		}
	}
	// Every status the relay answers exists from the start, at zero, so
	// that rate() over the refusals has data on a healthy relay.
	for _, code := range answered {
		m.requests.WithLabelValues(strconv.Itoa(code))
	}
	return m, nil
}

// answered are the HTTP statuses the relay answers with.
var answered = []int{http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound,
	http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge}

func (m *serverMetrics) done(code int) {
	if m != nil {
		m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	}
}

func (m *serverMetrics) granted(n int64, d time.Duration) {
	if m == nil {
		return
	}
	m.latency.Observe(d.Seconds())
	if n > 0 {
		m.tokens.Add(float64(n))
	}
}

// clientMetrics are the gateway's relay client's collectors. A nil
// *clientMetrics counts nothing.
type clientMetrics struct {
	relay, direct prometheus.Counter
	failures      prometheus.Counter
}

func newClientMetrics(reg prometheus.Registerer) (*clientMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	takes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "relay_client", Name: "takes_total",
		Help: "Lease calls of this gateway, by where they went: via relay, or direct to Redis (no relay answered).",
	}, []string{"via"})
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sluice", Subsystem: "relay_client", Name: "failures_total",
		Help: "Requests to a relay that failed (no answer in time, refused, unreadable); the relay is then left alone for a while.",
	})
	for _, c := range []prometheus.Collector{takes, failures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("relay: register metrics: %w", err)
		}
	}
	return &clientMetrics{relay: takes.WithLabelValues("relay"), direct: takes.WithLabelValues("direct"), failures: failures}, nil
}

func (m *clientMetrics) via(relay bool) {
	switch {
	case m == nil:
	case relay:
		m.relay.Inc()
	default:
		m.direct.Inc()
	}
}

func (m *clientMetrics) failed() {
	if m != nil {
		m.failures.Inc()
	}
}
