package share

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics registers gauges that read s when scraped.
func registerMetrics(s *Store, reg prometheus.Registerer) error {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "region", Name: name, Help: help}, f)
	}
	table := func(f func(*Table) float64) func() float64 {
		return func() float64 {
			if t := s.table.Load(); t != nil {
				return f(t)
			}
			return 0
		}
	}
	cs := []prometheus.Collector{
		gauge("share_age_seconds", "Seconds since the quota balancer last set or confirmed this region's shares (since start before the first table). Past the stale timeout (5 minutes by default) every key gets at most an even split.",
			func() float64 { return s.Age().Seconds() }),
		gauge("share_version", "Version of the region share table in force; 0 before the first.",
			table(func(t *Table) float64 { return float64(t.Version) })),
		gauge("share_stale", "1 while the region share table is past its stale timeout and every key gets at most an even split between the regions, else 0.",
			func() float64 {
				if s.Stale() {
					return 1
				}
				return 0
			}),
		gauge("share_default_ratio", "This region's default share of a limit, as a fraction: the even split before the first table.",
			func() float64 {
				if t := s.table.Load(); t != nil {
					return float64(t.Default) / Whole
				}
				return float64(s.even) / Whole
			}),
		gauge("share_keys", "Limits of busy keys the region share table gives this region its own share of.",
			table(func(t *Table) float64 { return float64(len(t.Shares)) })),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("share: register metrics: %w", err)
		}
	}
	return nil
}
