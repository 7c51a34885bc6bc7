package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestBenchOverhead runs `sluice bench --overhead` with tiny numbers against
// a real Redis and a counting upstream: the report has its three phases,
// each a table of both paths, the upstream saw requests directly and
// through the gateway, and the gateway's decisions came from Redis (or
// tokens leased from it).
func TestBenchOverhead(t *testing.T) {
	var direct, proxied atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Forwarded-For") != "" {
			proxied.Add(1)
		} else {
			direct.Add(1)
		}
	}))
	defer upstream.Close()
	redis := redistest.Standalone(t)
	var out strings.Builder
	err := runBench(context.Background(), []string{"--overhead", "--upstream", upstream.URL, "--redis", redis.Addr(),
		"--duration", "200ms", "--concurrency", "2", "--keys", "20"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	report := out.String()
	for _, want := range []string{"capacity: pairs as fast", "(half the capacity)", "(the capacity)"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, row := range []string{"direct", "gateway", `added \(p - p\)`, "paired diff"} {
		re := regexp.MustCompile(`(?m)^  ` + row + ` +(-?\d+\.\d{3}ms +){2}-?\d+\.\d{3}ms$`)
		if got := len(re.FindAllString(report, -1)); got != 3 {
			t.Errorf("%d rows %q with p50, p99 and p99.9, want one per phase:\n%s", got, row, report)
		}
	}
	// Redis's answers, tokens leased from it, and on a machine too busy to
	// hear Redis within 15 ms, local ones: never the in-process store's.
	decisions := regexp.MustCompile(`(?m)^  gateway decisions: (([a-z-]+) [0-9.]+% \(\d+\)(, )?)+$`)
	lines := strings.Join(decisions.FindAllString(report, -1), "\n")
	if got := strings.Count(lines, "\n") + 1; got != 3 || !strings.Contains(lines, " redis ") || strings.Contains(lines, " memory ") {
		t.Errorf("%d phases with gateway decisions from redis, want 3, and none from memory:\n%s", got, report)
	}
	if direct.Load() == 0 || proxied.Load() == 0 {
		t.Errorf("the upstream saw %d direct and %d proxied requests, want both", direct.Load(), proxied.Load())
	}
	if err := runBench(context.Background(), []string{"--overhead", "--upstream", "http://192.0.2.1:80"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("a non-loopback upstream: got error %v, want one naming loopback", err)
	}
}
