package bench_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/bench"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

func TestStoreRunCountsDecisions(t *testing.T) {
	store := memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(1e9, 0) }})
	limits := []limit.Limit{{Name: "s", Count: 1, Period: time.Hour, Burst: 10}}
	r := bench.Run(context.Background(), bench.Config{Concurrency: 4, MaxOps: 400, Duration: time.Minute},
		bench.StoreOp(store, 3, limits))
	if r.Ops != 400 || r.Errors != 0 {
		t.Fatalf("got %d ops %d errors, want 400 ops and none (%v)", r.Ops, r.Errors, r.FirstError)
	}
	if r.Allowed != 30 || r.Refused != 370 {
		t.Errorf("3 keys with a burst of 10 and a frozen clock: %d allowed %d refused, want 30 and 370", r.Allowed, r.Refused)
	}
	if !(r.P50 <= r.P99 && r.P99 <= r.Max && r.Max > 0) {
		t.Errorf("percentiles out of order: %v", r)
	}
}

func TestHTTPRunClassifiesStatus(t *testing.T) {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "" {
			t.Error("request without an API key")
		}
		n++
		if n%2 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	r := bench.Run(context.Background(), bench.Config{Concurrency: 1, MaxOps: 10, Duration: time.Minute},
		bench.HTTPOp(srv.Client(), srv.URL, 5))
	if r.Allowed != 5 || r.Refused != 5 || r.Errors != 0 {
		t.Errorf("alternating 200/429: %d allowed %d refused %d errors, want 5, 5, 0", r.Allowed, r.Refused, r.Errors)
	}
}

func TestRunStopsAtDuration(t *testing.T) {
	r := bench.Run(context.Background(), bench.Config{Concurrency: 2, Duration: 50 * time.Millisecond},
		func(ctx context.Context, _, _ int) (bool, error) {
			<-ctx.Done()
			return false, ctx.Err()
		})
	if r.Errors != 0 {
		t.Errorf("ops cut short by the end of the run counted as %d errors, want 0", r.Errors)
	}
}

func TestSources(t *testing.T) {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		fmt.Fprintf(w, "# TYPE sluice_gateway_decisions_total counter\n"+
			"sluice_gateway_decisions_total{limit=\"s\",outcome=\"allowed\",source=\"redis\"} %d\n"+
			"sluice_gateway_decisions_total{limit=\"s\",outcome=\"refused\",source=\"redis\"} %d\n"+
			"sluice_gateway_decisions_total{limit=\"s\",outcome=\"allowed\",source=\"lease\"} %d\n", 10*n, n, 5*n)
	}))
	defer srv.Close()
	before, err := bench.Sources(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if before["redis"] != 11 || before["lease"] != 5 {
		t.Fatalf("sources %v, want redis 11 and lease 5", before)
	}
	after, err := bench.Sources(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bench.Shares(before, after), "redis 68.8% (11), lease 31.2% (5)"; got != want {
		t.Errorf("Shares = %q, want %q", got, want)
	}
	if got := bench.Shares(after, after); got != "no decisions" {
		t.Errorf("Shares of no change = %q", got)
	}
	if _, err := bench.Sources(context.Background(), srv.Client(), srv.URL+"/nothing\x7f"); err == nil {
		t.Error("a bad URL read as metrics")
	}
}
