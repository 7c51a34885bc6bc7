package sharesync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/sharesync"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/share"
)

// TestClientTrimsReport checks that a gateway with more busy pairs than a
// report may carry sends the busiest MaxPairsPerReport of them, which the
// balancer takes, rather than a report it refuses whole.
func TestClientTrimsReport(t *testing.T) {
	n := balancer.MaxPairsPerReport * 3 / 2
	st, err := share.New(memstore.New(memstore.Config{}), share.Config{Regions: 1, MaxTracked: 4 * n})
	if err != nil {
		t.Fatal(err)
	}
	l := limit.Limit{Name: "s", Count: 1000, Period: time.Second}
	for i := range n {
		// The first key asks for the most: it must be kept.
		req := &limit.Request{Key: fmt.Sprintf("k:%06d", i), Cost: 1, Limits: []limit.Limit{l}}
		if i == 0 {
			req.Cost = 500
		}
		if _, err := st.Take(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan balancer.Report, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != balancer.ReportPath {
			<-r.Context().Done() // hold polls
			return
		}
		var rep balancer.Report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil || rep.Validate() != nil {
			http.Error(w, "bad report", http.StatusBadRequest)
		} else {
			w.WriteHeader(http.StatusNoContent)
		}
		select {
		case got <- rep:
		default:
		}
	}))
	defer hs.Close()
	c, err := sharesync.New(sharesync.Config{URLs: []string{hs.URL}, Region: "us", Gateway: "us-1", Store: st,
		Top: n, Interval: time.Hour, Wait: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); hs.CloseClientConnections(); <-done }()
	var rep balancer.Report
	select {
	case rep = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no report within 20 s of the client's start")
	}
	if err := rep.Validate(); err != nil {
		t.Errorf("the client's report is one the balancer refuses: %v", err)
	}
	if len(rep.Pairs) != balancer.MaxPairsPerReport {
		t.Errorf("got a report of %d pairs from %d busy ones, want the %d busiest", len(rep.Pairs), n, balancer.MaxPairsPerReport)
	}
	if len(rep.Pairs) > 0 && rep.Pairs[0].Key != "k:000000" {
		t.Errorf("got first pair %q, want the busiest, k:000000", rep.Pairs[0].Key)
	}
}
