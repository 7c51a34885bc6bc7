package rulesync

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the client's Prometheus metrics.
type metrics struct {
	version prometheus.Gauge
	canary  prometheus.Gauge
	fleet   prometheus.Gauge
	rules   prometheus.Gauge
	errors  prometheus.Counter
	age     prometheus.GaugeFunc
}

func newMetrics(c *Client) *metrics {
	m := &metrics{
		version: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rules_snapshot_version",
			Help: "Version of the rules snapshot in force; 0 before the first."}),
		canary: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rules_snapshot_canary",
			Help: "1 while this gateway runs a canary version."}),
		fleet: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rules_fleet_gateways",
			Help: "Gateways subscribed to the rules service, as it last said."}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rules_snapshot_rules",
			Help: "Rules in the snapshot in force; 0 means no request is limited."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_rules_sync_errors_total",
			Help: "Failed polls of the rules service and snapshots that did not load."}),
	}
	m.age = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_rules_snapshot_age_seconds",
		Help: "Seconds since the rules service last answered (or since the cached snapshot was saved)."},
		func() float64 { return c.Age().Seconds() })
	return m
}

// Register adds the client's metrics to reg: the snapshot's version, age
// (seconds since the service last answered) and number of rules, whether
// it is a canary, the fleet size and the sync errors. Config.Registerer does the same at
// New.
func (c *Client) Register(reg prometheus.Registerer) error {
	m := c.metrics
	for _, col := range []prometheus.Collector{m.version, m.canary, m.fleet, m.rules, m.errors, m.age} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("rulesync: register metrics: %w", err)
		}
	}
	return nil
}
