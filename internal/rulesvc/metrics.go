package rulesvc

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus metrics, as one replica sees them.
type metrics struct {
	stable   prometheus.Gauge
	canary   prometheus.Gauge
	halted   prometheus.Gauge
	gateways *prometheus.GaugeVec
	changes  *prometheus.CounterVec

	refusedGateways prometheus.Counter
	refusedReports  prometheus.Counter
	uncompared      prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		stable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rulesvc_stable_version",
			Help: "Snapshot version every gateway outside the canary runs."}),
		canary: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rulesvc_canary_version",
			Help: "Snapshot version the canary gateways run; 0 when no canary runs."}),
		halted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rulesvc_halted_version",
			Help: "Newest version whose canary halted, while no later version is promoted; 0 otherwise."}),
		gateways: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_rulesvc_gateways",
			Help: "Gateways subscribed, by region."}, []string{"region"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rulesvc_changes_total",
			Help: "Admin changes committed by this replica, by action."}, []string{"action"}),
		refusedGateways: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rulesvc_gateways_refused_total",
			Help: "Polls of new gateways refused because their token had its most gateways registered."}),
		refusedReports: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rulesvc_reports_refused_total",
			Help: "Reports refused because their gateway sent them faster than the report rate."}),
		uncompared: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rulesvc_uncompared_promotions_total",
			Help: "Canary versions promoted at the end of their window without enough requests on a side to compare refusal rates."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.stable, m.canary, m.halted, m.gateways, m.changes,
		m.refusedGateways, m.refusedReports, m.uncompared} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rulesvc: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(st *state) {
	if st.stable != nil {
		m.stable.Set(float64(st.stable.version))
	}
	m.canary.Set(float64(st.canary.ver()))
	m.halted.Set(float64(st.halted))
	m.gateways.Reset()
	for r, n := range st.fleet.Regions {
		m.gateways.WithLabelValues(r).Set(float64(n))
	}
}
