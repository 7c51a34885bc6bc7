package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/rules"
)

// fakeRules is a rules service for the gateway's shutdown tests: it serves
// one snapshot, holds later polls until their client goes, and keeps the
// reports it is sent.
type fakeRules struct {
	snap []byte

	mu      sync.Mutex
	polls   int               // polls being held; guarded by mu
	reports []rulesapi.Report // guarded by mu
}

func newFakeRules(t *testing.T, ruleYAML string) (*fakeRules, string) {
	t.Helper()
	set, err := rules.Parse("fake.yaml", []byte(ruleYAML))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(set.Document())
	if err != nil {
		t.Fatal(err)
	}
	set, err = rules.Compile(set.Document(), 1)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRules{}
	f.snap, err = json.Marshal(rulesapi.Snapshot{Version: 1, Hash: set.Hash, Fleet: rulesapi.Fleet{Total: 1}, Document: doc})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeRules) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case rulesapi.ReportPath:
		var rep rulesapi.Report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.reports = append(f.reports, rep)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case rulesapi.SnapshotPath:
		if after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64); after != 1 {
			w.Write(f.snap)
			return
		}
		f.mu.Lock()
		f.polls++
		f.mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		f.mu.Lock()
		f.polls--
		f.mu.Unlock()
		w.WriteHeader(http.StatusNotModified)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeRules) requestsReported() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := int64(0)
	for _, rep := range f.reports {
		for _, v := range rep.Versions {
			n += v.Requests
		}
	}
	return n
}

func (f *fakeRules) heldPolls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls
}

const hourlyRules = "rules: [{scope: default, limits: [{name: h, rate: 100, per: 1h}]}]"

func TestSIGTERMSendsTheLastReport(t *testing.T) {
	// Reports go every 5 s; a gateway stopped sooner still tells the rules
	// service what it decided.
	f, url := newFakeRules(t, hourlyRules)
	p := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--rules-url", url)
	for range 3 {
		if resp, _ := get(t, "GET", p.URL+"/", "X-API-Key", "k1"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t); code != 0 {
		t.Fatalf("exit code after SIGTERM %d, want 0; stderr:\n%s", code, p.Stderr())
	}
	if got := f.requestsReported(); got != 3 {
		t.Errorf("requests reported by the time the gateway exited: %d, want 3", got)
	}
}

func TestFailedStartStopsTheRulesClient(t *testing.T) {
	// A gateway that fails to start after it began following the rules
	// service stops following it before runGateway returns.
	f, url := newFakeRules(t, hourlyRules)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	err = runGateway(context.Background(), []string{"--listen", busy.Addr().String(), "--rules-url", url}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("got error %v, want one naming --listen", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.heldPolls() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("5s after runGateway failed: %d polls still held open by its rules client", f.heldPolls())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.heldPolls(); n > 0 {
		t.Errorf("after runGateway failed: the rules client polled again (%d held)", n)
	}
}

func TestSIGTERMLogsTheDrain(t *testing.T) {
	// An operator reading the log sees when draining began and how long it
	// may take, before the line saying the command stopped.
	for _, c := range []struct {
		args    []string
		stopped string
	}{
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--shutdown-timeout", "7s"}, "gateway stopped"},
		{[]string{"balancer", "--listen", "127.0.0.1:0", "--regions", "us,eu", "--trusted-network", "--shutdown-timeout", "7s"}, ""},
		{[]string{"rls", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--config", writeFile(t, "rls.yaml", rlsConfig),
			"--shutdown-timeout", "7s"}, "rls stopped"},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			p := sluice.Start(t, c.args...)
			p.Signal(t, syscall.SIGTERM)
			if code := p.Wait(t); code != 0 {
				t.Fatalf("exit code after SIGTERM %d, want 0; stderr:\n%s", code, p.Stderr())
			}
			log := p.Stderr()
			var drain string
			for line := range strings.Lines(log) {
				var rec struct {
					Level, Msg string
					TimeoutMS  *int64 `json:"timeout_ms"`
				}
				if json.Unmarshal([]byte(line), &rec) != nil || !strings.Contains(rec.Msg, "draining") {
					continue
				}
				drain = line
				if rec.Level != "INFO" || rec.TimeoutMS == nil || *rec.TimeoutMS != 7000 {
					t.Errorf("drain line %q: want level INFO and timeout_ms 7000", strings.TrimSpace(line))
				}
				break
			}
			if drain == "" {
				t.Fatalf("stderr lacks a line saying draining began:\n%s", log)
			}
			if c.stopped != "" && strings.Index(log, c.stopped) < strings.Index(log, drain) {
				t.Errorf("%q not logged after the drain line:\n%s", c.stopped, log)
			}
		})
	}
}
