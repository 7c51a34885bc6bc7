package guard_test

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestSeriesAtZeroOnHealthyStore checks that the per-node breaker, timeout
// and failure series, and the fallback series, exist at zero as soon as the
// guard starts on a healthy Redis, before any call: dashboards and alerts
// that divide or rate them have data on a healthy fleet.
func TestSeriesAtZeroOnHealthyStore(t *testing.T) {
	standalone := redistest.Standalone(t)
	cluster := redistest.StartCluster(t, 3, 0)
	primaries, err := cluster.Primaries(t.Context())
	if err != nil {
		t.Fatalf("cluster primaries: %v", err)
	}
	var primaryAddrs []string
	for _, p := range primaries {
		primaryAddrs = append(primaryAddrs, p.Addr())
	}
	for _, tc := range []struct {
		name  string
		addrs []string
		want  []string // shard labels
	}{
		{"standalone", []string{standalone.Addr()}, []string{standalone.Addr()}},
		{"cluster of 3 primaries", cluster.Addrs(), primaryAddrs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := redisstore.New(t.Context(), redisstore.Config{Addrs: tc.addrs})
			if err != nil {
				t.Fatalf("redisstore.New(%v): %v", tc.addrs, err)
			}
			t.Cleanup(rs.Close)
			reg := prometheus.NewPedanticRegistry()
			g, err := guard.New(rs, guard.Config{Registerer: reg})
			if err != nil {
				t.Fatalf("guard.New: %v", err)
			}
			t.Cleanup(g.Close)

			got := gather(t, reg)
			for _, name := range []string{
				"sluice_guard_breaker_state", "sluice_guard_breaker_opened_total",
				"sluice_guard_store_timeouts_total", "sluice_guard_store_failures_total",
			} {
				var shards []string
				for _, s := range got[name] {
					shards = append(shards, s.labels["shard"])
					if s.value != 0 {
						t.Errorf("%s{shard=%q} = %v, want 0", name, s.labels["shard"], s.value)
					}
				}
				slices.Sort(shards)
				want := slices.Sorted(slices.Values(tc.want))
				if !slices.Equal(shards, want) {
					t.Errorf("%s has series for shards %v, want one per primary %v", name, shards, want)
				}
			}
			var fallbacks []string
			for _, s := range got["sluice_guard_fallback_decisions_total"] {
				fallbacks = append(fallbacks, s.labels["source"]+"/"+s.labels["outcome"])
				if s.value != 0 {
					t.Errorf("fallback_decisions_total%v = %v, want 0", s.labels, s.value)
				}
			}
			slices.Sort(fallbacks)
			if want := []string{"fail-closed/refused", "local-fallback/allowed", "local-fallback/refused"}; !slices.Equal(fallbacks, want) {
				t.Errorf("fallback_decisions_total series %v, want %v", fallbacks, want)
			}
		})
	}
}

// series is one gathered sample: its labels and value.
type series struct {
	labels map[string]string
	value  float64
}

// gather scrapes reg and returns its counter and gauge samples by name.
func gather(t *testing.T, reg prometheus.Gatherer) map[string][]series {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[string][]series{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := series{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s.value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s.value = m.GetGauge().GetValue()
			default:
				continue
			}
			out[mf.GetName()] = append(out[mf.GetName()], s)
		}
	}
	return out
}
