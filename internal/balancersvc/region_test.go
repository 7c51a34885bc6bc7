package balancersvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/balancersvc"
	"github.com/sluice-rl/sluice/internal/longpoll"
	"github.com/sluice-rl/sluice/internal/sharesync"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/share"
)

// manualClock is a clock that moves only when told.
type manualClock struct{ t time.Time }

func (c *manualClock) Now() time.Time { return c.t }

// postReport sends rep to the balancer at url and returns the status.
func postReport(t *testing.T, url string, rep balancer.Report) int {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+balancer.ReportPath, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReturningRegionKeepsItsShares: a region counted down (no report for
// DownAfter) whose gateway comes back must never be handed the table that
// gives it nothing: its polls are answered 503 (keep what you have) while
// it is down, and its gateway's first report, sent as the client starts,
// brings it up again with shares at once, without waiting for the next
// interval (an hour here).
func TestReturningRegionKeepsItsShares(t *testing.T) {
	clk := &manualClock{t: time.Now().Truncate(time.Second)} // the client stamps reports by the real clock
	srv, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us", "eu"}, DownAfter: 30 * time.Second}, TrustedNetwork: true, Interval: time.Hour, MaxWait: 50 * time.Millisecond, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	report := func(region string) {
		t.Helper()
		if c := postReport(t, hs.URL, balancer.Report{Region: region, Gateway: region + "-1", SpanMillis: 10000, Total: 1000,
			Pairs: []balancer.PairReport{{Key: "k:a", Limit: "s", Asked: 100}}}); c != http.StatusNoContent {
			t.Fatalf("report from %s: got status %d, want 204", region, c)
		}
	}
	for range 3 {
		report("us")
		report("eu")
		clk.t = clk.t.Add(20 * time.Second)
	}
	srv.Rebalance() // both up
	// eu is cut off for a minute; us keeps reporting.
	for range 3 {
		clk.t = clk.t.Add(20 * time.Second)
		report("us")
		srv.Rebalance()
	}
	if _, ks := getKey(t, hs.URL, "k:a"); ks.Up["eu"] {
		t.Fatal("eu still counted up after a minute without a report")
	}
	resp, err := http.Get(hs.URL + balancer.SharesPath + "?region=eu&wait=0s")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(balancer.StandbyHeader) != "" {
		t.Errorf("poll of a region counted down: got status %d (standby %q), want 503 without the standby header",
			resp.StatusCode, resp.Header.Get(balancer.StandbyHeader))
	}

	// eu's gateway comes back as a fresh process.
	st, err := share.New(memstore.New(memstore.Config{}), share.Config{Regions: 2})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sharesync.New(sharesync.Config{URLs: []string{hs.URL}, Region: "eu", Gateway: "eu-1", Store: st,
		Interval: time.Hour, Wait: 50 * time.Millisecond, Backoff: longpoll.Backoff{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "eu's first table", func() bool { return st.Current() != nil })
	tb := st.Current()
	if tb.Default == 0 || tb.Shares[share.Pair{Key: "k:a", Limit: "s"}] == 0 {
		t.Errorf("returning region got default share %d and shares %v, want every share above 0", tb.Default, tb.Shares)
	}
	if _, ks := getKey(t, hs.URL, "k:a"); !ks.Up["eu"] {
		t.Error("eu not counted up after its gateway's first report")
	}
	l := limit.Limit{Name: "s", Count: 100, Period: time.Second}
	got := 0
	for range 10 {
		d, err := st.Take(context.Background(), &limit.Request{Key: "k:other", Limits: []limit.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got++
		}
	}
	if got == 0 {
		t.Errorf("returning region admitted 0 of 10 requests of a key at its default share %d, want some", tb.Default)
	}
}
