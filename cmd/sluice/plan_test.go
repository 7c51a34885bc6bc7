package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestPlanRefusesZero(t *testing.T) {
	for _, name := range []string{"peak-rps", "gateway-rps", "gateway-busy", "redis-share", "scripts-per-shard",
		"active-keys", "rules-per-key", "bytes-per-bucket", "limit-per-minute", "bytes-per-log-entry", "bytes-per-call", "busy-key-rps"} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runPlan([]string{"--" + name, "0"}, &out, &errb)
			if err == nil || !strings.Contains(err.Error(), "--"+name+" 0") {
				t.Errorf("--%s 0: got %v, want an error naming the flag", name, err)
			}
		})
	}
}

func TestPlanZeroFromEnvironmentIsRefused(t *testing.T) {
	code, _, stderr := runEnv(t, []string{"SLUICE_PEAK_RPS=0"}, "plan")
	if code == 0 || !strings.Contains(stderr, "--peak-rps 0") {
		t.Errorf("SLUICE_PEAK_RPS=0: exit %d, stderr %q; want a failure naming --peak-rps", code, stderr)
	}
}

func TestPlanRows(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{nil, []string{"392 MB", "token_bucket at 196 B", "busiest key's shard", "6.9% of one shard", "30000000 calls/s without the refusal cache"}},
		{[]string{"--algorithm", "gcra"}, []string{"340 MB", "gcra at 170 B"}},
		{[]string{"--algorithm", "sliding_log"}, []string{"21.2 GB"}},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		if err := runPlan(tt.args, &out, &errb); err != nil {
			t.Fatalf("plan %v: %v", tt.args, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("plan %v lacks %q:\n%s", tt.args, w, out.String())
			}
		}
	}
	var out, errb bytes.Buffer
	if err := runPlan([]string{"--algorithm", "leaky"}, &out, &errb); err == nil || !strings.Contains(err.Error(), `"leaky"`) {
		t.Errorf("--algorithm leaky: got %v, want it named", err)
	}
}

// TestPlanMeasure runs the short measurement against a redis-server it
// starts, and checks that the plan says it used the measured figures.
func TestPlanMeasure(t *testing.T) {
	var out, errb bytes.Buffer
	if err := runPlan([]string{"--measure", "--measure-duration", "300ms", "--gateway-rps", "5000"}, &out, &errb); err != nil {
		t.Fatalf("plan --measure: %v\n%s", err, errb.String())
	}
	for _, w := range []string{"measured here", "--scripts-per-shard measured", "--gateway-rps as given", "calls a request with the cache",
		" 334 "} { // gateways: 1M a second at 5,000 a gateway, 60% busy, as given
		if !strings.Contains(out.String(), w) {
			t.Errorf("plan --measure lacks %q:\n%s", w, out.String())
		}
	}
}
