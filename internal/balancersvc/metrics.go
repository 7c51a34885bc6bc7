package balancersvc

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/share"
)

// metrics are the balancer's Prometheus collectors. Without a Registerer
// they count into a registry of their own that nobody reads: nothing they
// count is on a request's path.
type metrics struct {
	regions      []string
	duration     prometheus.Histogram
	keys         prometheus.Gauge
	version      prometheus.Gauge
	up           *prometheus.GaugeVec
	defaultShare *prometheus.GaugeVec
	busyShare    *prometheus.GaugeVec
	reports      *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	clamps       *prometheus.CounterVec
	evicted      prometheus.Counter
	stateBytes   prometheus.Gauge
	fleetCalls   prometheus.Counter
}

func newMetrics(regions []string, reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	opts := func(name, help string) prometheus.GaugeOpts {
		return prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "balancer", Name: name, Help: help}
	}
	copts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "sluice", Subsystem: "balancer", Name: name, Help: help}
	}
	m := &metrics{
		regions: regions,
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "balancer", Name: "rebalance_duration_seconds",
			Help:    "Time one rebalance took: reading the reports and computing every region's shares.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		keys:         prometheus.NewGauge(opts("keys_balanced", "Limits of keys given shares that follow their traffic at the last rebalance; the others get the default split.")),
		version:      prometheus.NewGauge(opts("shares_version", "Version of the shares last published.")),
		up:           prometheus.NewGaugeVec(opts("region_up", "1 if the region reported within the down-after time, else 0 (its shares go to the others)."), []string{"region"}),
		defaultShare: prometheus.NewGaugeVec(opts("region_default_share_ratio", "The region's default share of every limit that is not balanced, as a fraction."), []string{"region"}),
		busyShare:    prometheus.NewGaugeVec(opts("region_share_ratio", "The region's mean share of the balanced limits, as a fraction."), []string{"region"}),
		reports:      prometheus.NewCounterVec(copts("reports_total", "Gateway reports taken, per region."), []string{"region"}),
		refusals:     prometheus.NewCounterVec(copts("refused_total", "Calls refused, by the region of the report or the token (unknown when neither names one) and reason: token, region, gateway, clock, invalid, gateways, size."), []string{"region", "reason"}),
		clamps:       prometheus.NewCounterVec(copts("reports_clamped_total", "Reports taken with counts cut down to what one gateway can have seen, by region and bound: rate (above the most tokens a second of a gateway) or pair (a pair above the report's total)."), []string{"region", "reason"}),
		evicted:      prometheus.NewCounter(copts("pairs_evicted_total", "Pairs dropped from the reports kept, the least busy first, to keep the state within its bound in bytes.")),
		stateBytes:   prometheus.NewGauge(opts("state_bytes", "Bytes of the reports kept, as counted against the bound (--max-state-bytes).")),
		fleetCalls:   prometheus.NewCounter(copts("fleet_token_calls_total", "Calls made with the fleet token (SLUICE_BALANCER_TOKEN), good for every region: it can be unset once this stops rising.")),
	}
	for _, c := range []prometheus.Collector{m.duration, m.keys, m.version, m.up, m.defaultShare, m.busyShare, m.reports,
		m.refusals, m.clamps, m.evicted, m.stateBytes, m.fleetCalls} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("balancer: register metrics: %w", err)
		}
	}
	for _, r := range regions {
		m.up.WithLabelValues(r)
		m.reports.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) rebalanced(p *balancer.Plan, d time.Duration) {
	m.duration.Observe(d.Seconds())
	if p == nil {
		for _, r := range m.regions {
			m.up.WithLabelValues(r).Set(0)
		}
		return
	}
	m.keys.Set(float64(len(p.Pairs)))
	for i, r := range p.Regions {
		m.up.WithLabelValues(r).Set(map[bool]float64{false: 0, true: 1}[p.Up[i]])
		m.defaultShare.WithLabelValues(r).Set(float64(p.Defaults[i]) / share.Whole)
		var sum float64
		for _, pp := range p.Pairs {
			sum += float64(pp.Shares[i])
		}
		if len(p.Pairs) > 0 {
			sum /= float64(len(p.Pairs))
		}
		m.busyShare.WithLabelValues(r).Set(sum / share.Whole)
	}
}

func (m *metrics) report(region string, tk balancer.Taken, state int64) {
	m.reports.WithLabelValues(region).Inc()
	for _, r := range tk.Clamped {
		m.clamps.WithLabelValues(region, r).Inc()
	}
	m.evicted.Add(float64(tk.Evicted))
	m.stateBytes.Set(float64(state))
}
