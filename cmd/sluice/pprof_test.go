package main

import (
	"testing"
)

// TestPprofOnlyWhenAsked checks that Go's profiles are off by default and
// served on the metrics address with --pprof or $SLUICE_PPROF.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want int
	}{
		{"gateway by default", nil, []string{"gateway", "--metrics-listen", "127.0.0.1:0"}, 404},
		{"gateway --pprof", nil, []string{"gateway", "--metrics-listen", "127.0.0.1:0", "--pprof"}, 200},
		{"gateway SLUICE_PPROF", []string{"SLUICE_PPROF=true"}, []string{"gateway", "--metrics-listen", "127.0.0.1:0"}, 200},
		{"balancer by default", nil, []string{"balancer", "--regions", "us,eu", "--trusted-network"}, 404},
		{"balancer --pprof", nil, []string{"balancer", "--regions", "us,eu", "--trusted-network", "--pprof"}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := sluice.StartEnv(t, c.env, append(c.args, "--listen", "127.0.0.1:0")...)
			base := p.MetricsURL
			if base == "" {
				base = p.URL // the balancer serves /metrics on --listen
			}
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
				if resp, _ := get(t, "GET", base+path); resp.StatusCode != c.want {
					t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, c.want)
				}
			}
			if resp, _ := get(t, "GET", base+"/metrics"); resp.StatusCode != 200 {
				t.Errorf("GET /metrics: %d, want 200", resp.StatusCode)
			}
		})
	}
}

func TestPprofNeedsAMetricsAddress(t *testing.T) {
	code, _, stderr := sluice.Run(t, "gateway", "--pprof")
	if code != 1 {
		t.Errorf("gateway --pprof without --metrics-listen: exit %d, want 1; stderr:\n%s", code, stderr)
	}
}
