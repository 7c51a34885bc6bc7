package bench_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/bench"
)

// TestRunPairs: every pair sends one request down each path, and the
// result holds both sides' percentiles, in order, and their differences.
func TestRunPairs(t *testing.T) {
	var hitsA, hitsB atomic.Int64
	a := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hitsA.Add(1) }))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hitsB.Add(1) }))
	defer b.Close()
	for _, tc := range []struct {
		name string
		cfg  bench.Pairs
		most int // pairs
	}{
		{"closed loop", bench.Pairs{Concurrency: 3, MaxPairs: 60, Duration: time.Minute}, 60},
		// 200 a second for 300 ms: about 60 on schedule, never more than 61.
		{"open loop", bench.Pairs{Rate: 200, Concurrency: 3, Duration: 300 * time.Millisecond}, 61},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hitsA.Store(0)
			hitsB.Store(0)
			r := bench.RunPairs(context.Background(), tc.cfg, bench.HTTPOp(a.Client(), a.URL, 5), bench.HTTPOp(b.Client(), b.URL, 5))
			if r.Errors != 0 || r.Pairs == 0 || r.Pairs > tc.most {
				t.Fatalf("got %d pairs, %d errors (%v), want 1 to %d and none", r.Pairs, r.Errors, r.FirstError, tc.most)
			}
			if got := []int64{hitsA.Load(), hitsB.Load()}; got[0] != int64(r.Pairs) || got[1] != int64(r.Pairs) {
				t.Errorf("the paths saw %v requests, want %d each", got, r.Pairs)
			}
			for _, p := range []bench.Percentiles{r.A, r.B} {
				if !(0 < p.P50 && p.P50 <= p.P99 && p.P99 <= p.P999) {
					t.Errorf("percentiles %+v: want positive and in order", p)
				}
			}
			if want := (bench.Percentiles{P50: r.B.P50 - r.A.P50, P99: r.B.P99 - r.A.P99, P999: r.B.P999 - r.A.P999}); r.Added != want {
				t.Errorf("added %+v, want B's percentiles less A's: %+v", r.Added, want)
			}
			var out strings.Builder
			bench.WritePairs(&out, r, "direct", "gateway")
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 6 || !strings.Contains(lines[1], "p99.9") || !strings.HasPrefix(strings.TrimSpace(lines[3]), "gateway") {
				t.Errorf("table:\n%s\nwant a summary, a heading and rows direct, gateway, added, paired", out.String())
			}
		})
	}
}
