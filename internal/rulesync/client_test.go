package rulesync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/internal/longpoll"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/rules"
)

// fakeService serves snapshots and takes reports like the rules service,
// with faults on demand. The real service is tested in package rulesvc;
// this one breaks in ways that one should not.
type fakeService struct {
	mu           sync.Mutex
	snap         rulesapi.Snapshot // guarded by mu
	status       int               // non-zero: answer polls with this; guarded by mu
	reports      []rulesapi.Report // guarded by mu
	reportStatus int               // non-zero: refuse reports with this; guarded by mu
	polls        int               // guarded by mu
	afters       []string          // the after= of every poll; guarded by mu
	sticky       bool              // answer 200 even for the version held; guarded by mu
	changed      chan struct{}     // closed on each change; guarded by mu
}

func newFake(t *testing.T, version int64, doc rules.Document) (*fakeService, *httptest.Server) {
	f := &fakeService{changed: make(chan struct{})}
	f.set(t, version, doc)
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return f, srv
}

// set publishes doc as version.
func (f *fakeService) set(t *testing.T, version int64, doc rules.Document) {
	t.Helper()
	set, err := rules.Compile(doc, version)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f.setSnapshot(rulesapi.Snapshot{Version: version, Hash: set.Hash, Fleet: rulesapi.Fleet{Total: 3, Regions: map[string]int{"eu": 2, "us": 1}}, Document: raw})
}

func (f *fakeService) setSnapshot(sn rulesapi.Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap = sn
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeService) fail(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = status
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case rulesapi.ReportPath:
		var rep rulesapi.Report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.reportStatus != 0 {
			w.WriteHeader(f.reportStatus)
			return
		}
		f.reports = append(f.reports, rep)
		w.WriteHeader(http.StatusNoContent)
		return
	case rulesapi.SnapshotPath:
	default:
		http.NotFound(w, r)
		return
	}
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	f.mu.Lock()
	f.afters = append(f.afters, r.URL.Query().Get("after"))
	f.mu.Unlock()
	wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
	timeout := time.After(wait)
	for {
		f.mu.Lock()
		f.polls++
		sn, status, changed, sticky := f.snap, f.status, f.changed, f.sticky
		f.mu.Unlock()
		switch {
		case status != 0:
			w.WriteHeader(status)
			w.Write([]byte(`{"error":"injected fault"}`))
			return
		case sn.Version != after || sticky:
			json.NewEncoder(w).Encode(sn)
			return
		}
		select {
		case <-changed:
		case <-timeout:
			w.WriteHeader(http.StatusNotModified)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func docWithDefault(rate int64) rules.Document {
	return rules.Document{Rules: []rules.Rule{{Scope: rules.ScopeDefault,
		Limits: []rules.Limit{{Name: "s", Rate: rules.Rate(rate), Per: rules.Duration(time.Second)}}}}}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// run starts c until the test ends.
func run(t *testing.T, c *rulesync.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func newClient(t *testing.T, url string, cfg rulesync.Config) *rulesync.Client {
	t.Helper()
	cfg.URL, cfg.Gateway = url, "gw-test"
	cfg.Logger = discard()
	if cfg.Wait == 0 {
		cfg.Wait = time.Second
	}
	if cfg.Backoff == (longpoll.Backoff{}) {
		cfg.Backoff = longpoll.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	}
	c, err := rulesync.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func versionOf(c *rulesync.Client) int64 {
	if s := c.Current(); s != nil {
		return s.Version
	}
	return 0
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  rulesync.Config
		want string
	}{
		{"no URL", rulesync.Config{Gateway: "g"}, "URL is empty"},
		{"not http", rulesync.Config{URL: "ftp://x", Gateway: "g"}, "want an http or https URL"},
		{"no gateway", rulesync.Config{URL: "http://x"}, "gateway ID is empty"},
		{"gateway with space", rulesync.Config{URL: "http://x", Gateway: "a b"}, "printable ASCII"},
		{"backoff upside down", rulesync.Config{URL: "http://x", Gateway: "g", Backoff: longpoll.Backoff{Min: time.Second, Max: time.Millisecond}}, "MaxBackoff not below it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rulesync.New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestFollowsVersionsAndFleet(t *testing.T) {
	f, srv := newFake(t, 3, docWithDefault(10))
	c := newClient(t, srv.URL, rulesync.Config{})
	if c.Current() != nil {
		t.Fatal("got a rule set before Run, want none")
	}
	run(t, c)
	<-c.Ready()
	waitFor(t, "version 3", func() bool { return versionOf(c) == 3 })
	if f := c.FleetSize(); f.Total != 3 || f.Regions["eu"] != 2 || f.Regions["us"] != 1 {
		t.Errorf("got fleet %+v, want 3: eu 2, us 1", f)
	}
	f.set(t, 4, docWithDefault(20))
	waitFor(t, "version 4", func() bool { return versionOf(c) == 4 })
	if got := c.Current().Resolve(time.Now(), rules.Query{APIKey: "k"}).Limits[0].Count; got != 20 {
		t.Errorf("got rate %d, want 20", got)
	}
	// A lower version is taken when the service marks it a rollback: a
	// halted canary goes back.
	f.setRollback(t, 2, docWithDefault(5))
	waitFor(t, "back to version 2", func() bool { return versionOf(c) == 2 })
}

// setRollback publishes doc as version, marked as a rollback.
func (f *fakeService) setRollback(t *testing.T, version int64, doc rules.Document) {
	t.Helper()
	f.set(t, version, doc)
	f.mu.Lock()
	f.snap.Rollback = true
	f.mu.Unlock()
}

// afters returns the versions the client named in its polls so far.
func (f *fakeService) seenAfters() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.afters...)
}

// A version that is not positive is never swapped in (the next poll could
// not name it), and an older one only when the service says it is a
// rollback: a replica or proxy that is behind cannot undo a change.
func TestRefusesVersionsItMustNotTake(t *testing.T) {
	f, srv := newFake(t, 5, docWithDefault(10))
	c := newClient(t, srv.URL, rulesync.Config{})
	run(t, c)
	waitFor(t, "version 5", func() bool { return versionOf(c) == 5 })
	for _, v := range []int64{-7, 0, 3} {
		before := testutil.ToFloat64(c.ErrorsForTest())
		f.set(t, v, docWithDefault(1))
		waitFor(t, fmt.Sprintf("version %d refused a few times", v), func() bool {
			return testutil.ToFloat64(c.ErrorsForTest()) >= before+3
		})
		if got := versionOf(c); got != 5 {
			t.Errorf("after the service offered version %d: got version %d, want 5 kept", v, got)
		}
	}
	for _, a := range f.seenAfters() {
		if a != "0" && a != "5" {
			t.Errorf("a poll named version %s; want only 0 (none yet) and 5", a)
		}
	}
	f.setRollback(t, 3, docWithDefault(1))
	waitFor(t, "the rollback to version 3", func() bool { return versionOf(c) == 3 })
}

// A service or proxy that answers 200 with the version already held, at
// once, is not polled without pause.
func TestBacksOffWhenAnsweredWithTheVersionHeld(t *testing.T) {
	f, srv := newFake(t, 5, docWithDefault(10))
	f.mu.Lock()
	f.sticky = true
	f.mu.Unlock()
	c := newClient(t, srv.URL, rulesync.Config{Backoff: longpoll.Backoff{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
	run(t, c)
	waitFor(t, "version 5", func() bool { return versionOf(c) == 5 })
	f.mu.Lock()
	start := f.polls
	f.mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	f.mu.Lock()
	polls := f.polls - start
	f.mu.Unlock()
	// With backoff from 20 ms to 100 ms, half a second holds at most about
	// ten polls; without, a loopback server answers thousands.
	if polls > 40 {
		t.Errorf("got %d polls in 500ms answered with the version held, want backoff (at most about 10)", polls)
	}
	if got := testutil.ToFloat64(c.ErrorsForTest()); got != 0 {
		t.Errorf("got %v sync errors, want 0: an answer with the version held is not a failure", got)
	}
}

// An empty rule set from the service limits nothing: it is taken, since
// the service says so, but with a warning and a metric an alert can use.
func TestEmptySnapshotIsLoud(t *testing.T) {
	f, srv := newFake(t, 5, docWithDefault(10))
	var logs proctest.Buffer
	reg := prometheus.NewRegistry()
	cfg := rulesync.Config{URL: srv.URL, Gateway: "gw-test", Registerer: reg, Wait: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	c, err := rulesync.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitFor(t, "version 5", func() bool { return versionOf(c) == 5 })
	rulesGauge := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "sluice_rules_snapshot_rules" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no metric sluice_rules_snapshot_rules")
		return 0
	}
	if got := rulesGauge(); got != 1 {
		t.Errorf("got sluice_rules_snapshot_rules %v, want 1", got)
	}
	f.set(t, 6, rules.Document{Rules: []rules.Rule{}})
	waitFor(t, "version 6", func() bool { return versionOf(c) == 6 })
	if got := rulesGauge(); got != 0 {
		t.Errorf("got sluice_rules_snapshot_rules %v, want 0", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "no request is limited") {
		t.Errorf("no warning logged for the empty rule set; log:\n%s", logs.String())
	}
}

func TestKeepsRulesWhileServiceFails(t *testing.T) {
	f, srv := newFake(t, 3, docWithDefault(10))
	reg := prometheus.NewRegistry()
	c := newClient(t, srv.URL, rulesync.Config{Registerer: reg})
	run(t, c)
	waitFor(t, "version 3", func() bool { return versionOf(c) == 3 })

	tests := []struct {
		name   string
		break_ func()
	}{
		{"errors", func() { f.fail(http.StatusInternalServerError) }},
		{"damaged snapshot", func() {
			f.fail(0)
			f.setSnapshot(rulesapi.Snapshot{Version: 9, Hash: "0000", Document: json.RawMessage(`{"rules":[]}`)})
		}},
		{"snapshot that does not compile", func() {
			f.setSnapshot(rulesapi.Snapshot{Version: 10, Hash: "x", Document: json.RawMessage(`{"rules":[{"scope":"planet","limits":[]}]}`)})
		}},
		{"not JSON", func() { f.setSnapshot(rulesapi.Snapshot{Version: 11, Document: json.RawMessage(`"x"`)}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(c.ErrorsForTest())
			tt.break_()
			waitFor(t, "a few failed polls", func() bool { return testutil.ToFloat64(c.ErrorsForTest()) >= before+3 })
			if got := versionOf(c); got != 3 {
				t.Errorf("got version %d, want the last good one, 3", got)
			}
		})
	}
	f.set(t, 12, docWithDefault(30))
	waitFor(t, "version 12 once the service is well", func() bool { return versionOf(c) == 12 })
	if got := testutil.ToFloat64(c.ErrorsForTest()); got < 12 {
		t.Errorf("got %v sync errors counted, want at least 12", got)
	}
}

func TestCacheFileStartsAGatewayWhileServiceIsDown(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "rules.json")
	_, srv := newFake(t, 7, docWithDefault(10))
	c := newClient(t, srv.URL, rulesync.Config{CacheFile: cache})
	run(t, c)
	waitFor(t, "the cache file", func() bool {
		_, err := os.Stat(cache)
		return err == nil && versionOf(c) == 7
	})
	srv.CloseClientConnections()
	srv.Close()
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("got %d files in the cache's directory, want only the cache (no temporary files left)", len(entries))
	}

	// A new gateway, the service down: it starts from the cache.
	now := time.Now().Add(time.Minute)
	reg := prometheus.NewRegistry()
	c2 := newClient(t, srv.URL, rulesync.Config{CacheFile: cache, Registerer: reg, Now: func() time.Time { return now }})
	select {
	case <-c2.Ready():
	default:
		t.Fatal("got no rules from the cache")
	}
	if got := versionOf(c2); got != 7 {
		t.Errorf("got version %d from the cache, want 7", got)
	}
	if age := c2.Age(); age < time.Minute || age > time.Minute+10*time.Second {
		t.Errorf("got age %v, want about a minute: since the cache was saved", age)
	}
	if f := c2.FleetSize(); f.Total != 3 {
		t.Errorf("got fleet %+v from the cache, want 3", f)
	}
	metrics := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		metrics[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	if metrics["sluice_rules_snapshot_version"] != 7 || metrics["sluice_rules_snapshot_age_seconds"] < 60 {
		t.Errorf("got version %v age %v, want 7 and at least 60",
			metrics["sluice_rules_snapshot_version"], metrics["sluice_rules_snapshot_age_seconds"])
	}
}

func TestBadCacheFileIsIgnored(t *testing.T) {
	for name, content := range map[string]string{
		"not JSON":         "{{{",
		"wrong hash":       `{"snapshot":{"version":3,"hash":"abc","document":{"rules":[]}},"saved_at":"2026-01-01T00:00:00Z"}`,
		"bad document":     `{"snapshot":{"version":3,"hash":"abc","document":{"rules":[{"scope":"x"}]}}}`,
		"negative version": `{"snapshot":{"version":-7,"hash":"abc","document":{"rules":[]}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "rules.json")
			if err := os.WriteFile(cache, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			c := newClient(t, "http://127.0.0.1:1", rulesync.Config{CacheFile: cache})
			if c.Current() != nil {
				t.Errorf("got version %d from a bad cache, want no rules", versionOf(c))
			}
			// The gateway that gives up says why the cache did not help.
			if err := c.CacheError(); err == nil || !strings.Contains(err.Error(), "cache file "+cache+" is unreadable") {
				t.Errorf("got cache error %v, want one naming the file as unreadable", err)
			}
		})
	}
}

func TestAgeGrowsWithoutTheService(t *testing.T) {
	now := time.Now()
	c := newClient(t, "http://127.0.0.1:1", rulesync.Config{Now: func() time.Time { return now }})
	now = now.Add(61 * time.Second)
	if got := c.Age(); got != 61*time.Second {
		t.Errorf("got age %v after 61 s without the service, want 61s: the stale alert must fire", got)
	}
}
