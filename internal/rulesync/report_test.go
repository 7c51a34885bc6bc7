package rulesync_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

// totals sums the reports the fake received.
type totals struct {
	requests, refused map[int64]int64
	shadow            map[int64]int64            // by rule
	keys              map[int64]map[string]int64 // by rule, then key
	refusals          map[int64]int64            // by enforced rule
	refusedKeys       map[int64]map[string]int64 // by enforced rule, then hashed key
	limits            map[int64]string           // by enforced rule
}

func (f *fakeService) totals() totals {
	f.mu.Lock()
	defer f.mu.Unlock()
	tot := totals{requests: map[int64]int64{}, refused: map[int64]int64{}, shadow: map[int64]int64{}, keys: map[int64]map[string]int64{},
		refusals: map[int64]int64{}, refusedKeys: map[int64]map[string]int64{}, limits: map[int64]string{}}
	for _, rep := range f.reports {
		for _, v := range rep.Versions {
			for _, rr := range v.Refusals {
				tot.refusals[rr.Rule] += rr.Refused
				tot.limits[rr.Rule] = rr.Limit
				if tot.refusedKeys[rr.Rule] == nil {
					tot.refusedKeys[rr.Rule] = map[string]int64{}
				}
				for _, k := range rr.TopKeys {
					tot.refusedKeys[rr.Rule][k.Key] += k.Count
				}
			}
			tot.requests[v.Version] += v.Requests
			tot.refused[v.Version] += v.Refused
			for _, sh := range v.Shadow {
				tot.shadow[sh.Rule] += sh.WouldRefuse
				if tot.keys[sh.Rule] == nil {
					tot.keys[sh.Rule] = map[string]int64{}
				}
				for _, k := range sh.TopKeys {
					tot.keys[sh.Rule][k.Key] += k.Count
				}
			}
		}
	}
	return tot
}

func TestReportsCountDecisionsPerVersion(t *testing.T) {
	f, srv := newFake(t, 5, docWithDefault(10))
	// Reports fail at first: their counts must come with a later one.
	f.mu.Lock()
	f.reportStatus = http.StatusServiceUnavailable
	f.mu.Unlock()
	c := newClient(t, srv.URL, rulesync.Config{ReportInterval: 10 * time.Millisecond})
	run(t, c)

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				c.Record(5, i%10 == 0)
				if g == 0 && i < 10 {
					c.Record(6, true)
				}
			}
		})
	}
	wg.Wait()
	for range 3 {
		c.RecordShadow(5, 42, "key_a")
	}
	c.RecordShadow(5, 42, "key_b")
	c.RecordShadow(6, 43, "ip:192.0.2.1")
	time.Sleep(50 * time.Millisecond) // let a few reports fail
	f.mu.Lock()
	f.reportStatus = 0
	f.mu.Unlock()

	want := totals{
		requests: map[int64]int64{5: 8000, 6: 10},
		refused:  map[int64]int64{5: 800, 6: 10},
		shadow:   map[int64]int64{42: 4, 43: 1},
	}
	waitFor(t, "every count reported", func() bool {
		got := f.totals()
		return got.requests[5] == want.requests[5] && got.requests[6] == want.requests[6] && got.shadow[42] == 4 && got.shadow[43] == 1
	})
	got := f.totals()
	for v := range want.requests {
		if got.requests[v] != want.requests[v] || got.refused[v] != want.refused[v] {
			t.Errorf("version %d: got %d requests %d refused, want %d and %d", v, got.requests[v], got.refused[v], want.requests[v], want.refused[v])
		}
	}
	if got.keys[42]["key_a"] != 3 || got.keys[42]["key_b"] != 1 || got.keys[43]["ip:192.0.2.1"] != 1 {
		t.Errorf("got shadow keys %v, want rule 42: key_a 3, key_b 1; rule 43: ip:192.0.2.1 1", got.keys)
	}
}

func TestObserveCountsOutcomes(t *testing.T) {
	f, srv := newFake(t, 9, docWithDefault(10))
	c := newClient(t, srv.URL, rulesync.Config{ReportInterval: 10 * time.Millisecond})
	run(t, c)
	waitFor(t, "version 9", func() bool { return versionOf(c) == 9 })
	shadowRule := &rules.Rule{ID: 77, Mode: rules.Shadow}
	lims := []limit.Limit{{Name: "s", Count: 1, Period: time.Second}}
	events := []rulesync.Outcome{
		{Key: "k:key_a", Limits: lims, Decision: limit.Decision{Allowed: true}},
		{Key: "k:key_a", Limits: lims, Decision: limit.Decision{Allowed: false}},
		{Key: "k:key_a", Limits: lims, Err: errors.New("store down")}, // says nothing about the rules
		// A request no enforced limit applied to counts as let through,
		// so that a canary refusing such requests can be compared.
		{Key: "ip:192.0.2.5"},
		{Key: "k:key_a", Shadow: true, Rules: []*rules.Rule{shadowRule}, Decision: limit.Decision{Allowed: false}},
		{Key: "ip:192.0.2.9", Shadow: true, Rules: []*rules.Rule{shadowRule}, Decision: limit.Decision{Allowed: false}},
		{Key: "k:key_b", Shadow: true, Rules: []*rules.Rule{shadowRule}, Decision: limit.Decision{Allowed: true}},
		{Key: "k:key_c", Shadow: true, Rules: []*rules.Rule{shadowRule}, Decision: limit.Decision{Allowed: false, Index: 3}},
	}
	for _, e := range events {
		e.Version = 9
		c.Observe(e)
	}
	waitFor(t, "the events reported", func() bool {
		got := f.totals()
		return got.requests[9] == 3 && got.shadow[77] == 2
	})
	got := f.totals()
	if got.refused[9] != 1 || got.keys[77]["k:key_a"] != 1 || got.keys[77]["ip:192.0.2.9"] != 1 {
		t.Errorf("got %d refused and shadow keys %v, want 1 refused and k:key_a, ip:192.0.2.9 once each", got.refused[9], got.keys[77])
	}
}

// TestObserveReportsRefusingRules checks that a refusal is reported under
// the enforced rule and limit that refused, its key hashed as the
// decision log writes it, never raw.
func TestObserveReportsRefusingRules(t *testing.T) {
	f, srv := newFake(t, 9, docWithDefault(10))
	c := newClient(t, srv.URL, rulesync.Config{ReportInterval: 10 * time.Millisecond})
	run(t, c)
	waitFor(t, "version 9", func() bool { return versionOf(c) == 9 })
	plan, override := &rules.Rule{ID: 5, Scope: rules.ScopePlan}, &rules.Rule{ID: 6, Scope: rules.ScopeKey}
	lims := []limit.Limit{{Name: "minute", Count: 10, Period: time.Minute}, {Name: "second", Count: 1, Period: time.Second}}
	rs := []*rules.Rule{plan, override}
	for _, o := range []rulesync.Outcome{
		{Key: "k:key_a", Limits: lims, Rules: rs, Decision: limit.Decision{Index: 1}},
		{Key: "k:key_a", Limits: lims, Rules: rs, Decision: limit.Decision{Index: 1}},
		{Key: "k:key_b", Limits: lims, Rules: rs, Decision: limit.Decision{Index: 0}},
		{Key: "k:key_b", Limits: lims, Rules: rs, Decision: limit.Decision{Allowed: true, Index: 0}},
	} {
		o.Version = 9
		c.Observe(o)
	}
	waitFor(t, "the refusals reported", func() bool {
		got := f.totals()
		return got.refusals[5] == 1 && got.refusals[6] == 2
	})
	got := f.totals()
	if got.refusedKeys[6][keyhash.Of("k:key_a")] != 2 || got.refusedKeys[5][keyhash.Of("k:key_b")] != 1 || got.limits[6] != "second" {
		t.Errorf("got refused keys %v limits %v, want rule 6 (second): key_a's hash twice; rule 5: key_b's once", got.refusedKeys, got.limits)
	}
}

// gatedStore is a memstore whose first Take waits, once it has started,
// until release is closed: a stall between a request's resolution and its
// decision, long enough to swap the rules in.
type gatedStore struct {
	*memstore.Store
	once    sync.Once
	entered chan struct{} // closed when the first Take has started
	release chan struct{} // closed by the test to let it finish
}

func (g *gatedStore) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			return limit.Decision{}, ctx.Err()
		}
	}
	return g.Store.Take(ctx, req)
}

func TestObserveCountsTheVersionThatResolvedTheRequest(t *testing.T) {
	f, srv := newFake(t, 5, docWithDefault(1000))
	c := newClient(t, srv.URL, rulesync.Config{ReportInterval: 10 * time.Millisecond})
	run(t, c)
	waitFor(t, "version 5", func() bool { return versionOf(c) == 5 })
	store := &gatedStore{Store: memstore.New(memstore.Config{}), entered: make(chan struct{}), release: make(chan struct{})}
	// The gateway feeds the client as cmd/sluice wires it.
	lim, err := gateway.New(gateway.Config{Rules: c, Store: store, OnDecision: func(e gateway.Event) { c.Observe(outcome(e)) }})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func() int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "key_a")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}

	// The first request is resolved under version 5 and decided after 6
	// is in force; the second is resolved under 6.
	done := make(chan int, 1)
	go func() { done <- serve() }()
	select {
	case <-store.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the store")
	}
	f.set(t, 6, docWithDefault(1000))
	waitFor(t, "version 6", func() bool { return versionOf(c) == 6 })
	close(store.release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("request across the swap: status %d, want 200", code)
	}
	if code := serve(); code != http.StatusOK {
		t.Fatalf("request after the swap: status %d, want 200", code)
	}
	waitFor(t, "both requests reported", func() bool {
		got := f.totals()
		return got.requests[5]+got.requests[6] == 2
	})
	if got := f.totals(); got.requests[5] != 1 || got.requests[6] != 1 {
		t.Errorf("got %d requests under version 5 and %d under 6, want 1 and 1 (the version each was resolved against)",
			got.requests[5], got.requests[6])
	}
}

func TestLastReportOnStop(t *testing.T) {
	// Counts of the last interval reach the service when Run stops, before
	// it returns: a gateway shutting down does not lose them.
	f, srv := newFake(t, 5, docWithDefault(10))
	c := newClient(t, srv.URL, rulesync.Config{ReportInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	<-c.Ready()
	for i := range 7 {
		c.Record(5, i < 2)
	}
	cancel()
	<-done
	got := f.totals()
	if got.requests[5] != 7 || got.refused[5] != 2 {
		t.Errorf("reported when Run stopped: %d requests, %d refused; want 7 and 2", got.requests[5], got.refused[5])
	}
}

// A gateway running a canary version reports every second, whatever its
// report interval, so the service can judge a canary within its window of
// a few seconds; the others keep their interval.
func TestCanaryReportsEverySecond(t *testing.T) {
	t.Parallel()
	for _, canary := range []bool{true, false} {
		t.Run(fmt.Sprintf("canary %v", canary), func(t *testing.T) {
			t.Parallel()
			f, srv := newFake(t, 5, docWithDefault(10))
			f.mu.Lock()
			f.snap.Canary = canary
			f.mu.Unlock()
			c := newClient(t, srv.URL, rulesync.Config{ReportInterval: time.Hour})
			run(t, c)
			waitFor(t, "version 5", func() bool { return versionOf(c) == 5 })
			c.Record(5, true)
			time.Sleep(2500 * time.Millisecond)
			got := f.totals().requests[5]
			if want := map[bool]int64{true: 1, false: 0}[canary]; got != want {
				t.Errorf("2.5 s after a decision, with a report interval of an hour: got %d requests reported, want %d", got, want)
			}
		})
	}
}

// outcome is the Outcome of e, as cmd/sluice copies it.
func outcome(e gateway.Event) rulesync.Outcome {
	return rulesync.Outcome{Version: e.RulesVersion, Key: e.Key, Shadow: e.Shadow, Limits: e.Limits, Rules: e.Rules, Decision: e.Decision, Err: e.Err}
}
