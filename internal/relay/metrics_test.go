package relay_test

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/relay"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestSeriesAtZero checks that the relay's counters, and the relay
// client's, exist at zero before any request, as the guard's do:
// dashboards and alerts that rate them have data on a healthy fleet.
func TestSeriesAtZero(t *testing.T) {
	srv := redistest.Standalone(t)
	p, err := pipeline.New(t.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}},
		Fleet: limit.Fleet{Gateways: 1}, Lease: lease.Config{WaitForRefill: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	reg := prometheus.NewPedanticRegistry()
	if _, err := relay.NewServer(relay.ServerConfig{Store: p.Lease(), Token: token, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	c, err := relay.NewClient(relay.ClientConfig{URLs: []string{"http://127.0.0.1:1"}, Direct: p.Lease(), Token: token, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, tc := range []struct{ name, label, value string }{
		{"sluice_relay_tokens_granted_total", "", ""},
		{"sluice_relay_client_takes_total", "via", "relay"},
		{"sluice_relay_client_takes_total", "via", "direct"},
		{"sluice_relay_client_failures_total", "", ""},
	} {
		if v, ok := series(t, reg, tc.name, tc.label, tc.value); !ok || v != 0 {
			t.Errorf("%s{%s=%q}: got %v (present %v), want 0, present", tc.name, tc.label, tc.value, v, ok)
		}
	}
	for _, code := range []int{200, 400, 401, 404, 405, 413} {
		if v, ok := series(t, reg, "sluice_relay_requests_total", "code", strconv.Itoa(code)); !ok || v != 0 {
			t.Errorf("sluice_relay_requests_total{code=\"%d\"}: got %v (present %v), want 0, present", code, v, ok)
		}
	}
}

// series returns the counter name{label=value} gathered from reg (any
// series when label is empty), and whether it is there.
func series(t *testing.T, reg *prometheus.Registry, name, label, value string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && (label == "" || hasLabel(m, label, value)) {
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}
