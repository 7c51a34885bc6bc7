package rls_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rls"
)

func TestWatcherReloadsAtomicallyAndKeepsRulesOnABadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	one := "domain: w\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n"
	write(t, path, one)
	var logs bytes.Buffer
	w, err := rls.Watch(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s := serveRules(t, w, memstore.New(memstore.Config{}))
	runSteps(t, s, "w", []step{
		{descs: ds(desc("k", "a")), want: "OK: OK"},
		{descs: ds(desc("k", "a")), want: "OVER_LIMIT: OVER_LIMIT"},
	})

	write(t, path, "domain: w\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: oops}}]\n")
	if changed, err := w.Reload(); changed || err == nil || !strings.Contains(err.Error(), "requests_per_unit") {
		t.Fatalf("bad file: got changed %v, error %v; want the old rules kept and an error naming requests_per_unit", changed, err)
	}
	runSteps(t, s, "w", []step{{descs: ds(desc("k", "a")), want: "OVER_LIMIT: OVER_LIMIT"}})

	// Replaced the way a ConfigMap is: a new file renamed over the old.
	tmp := filepath.Join(dir, ".tmp")
	write(t, tmp, strings.Replace(one, "requests_per_unit: 1", "requests_per_unit: 3", 1))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if changed, err := w.Reload(); !changed || err != nil {
		t.Fatalf("good file: got changed %v, error %v; want the new rules in force", changed, err)
	}
	// The counter carries over: 1 taken of the new 3.
	runSteps(t, s, "w", []step{
		{descs: ds(desc("k", "a")), want: "OK: OK"},
		{descs: ds(desc("k", "a")), want: "OK: OK"},
		{descs: ds(desc("k", "a")), want: "OVER_LIMIT: OVER_LIMIT"},
	})
	if changed, err := w.Reload(); changed || err != nil {
		t.Errorf("unchanged file: got changed %v, error %v; want neither", changed, err)
	}
	if !strings.Contains(logs.String(), "rls config loaded") {
		t.Errorf("logs %q: want the loads logged", logs.String())
	}
}

func TestJSONEndpoint(t *testing.T) {
	s := serve(t, "domain: j\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n", memstore.New(memstore.Config{}))
	h := httptest.NewServer(s.svc)
	t.Cleanup(h.Close)
	body := `{"domain": "j", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`
	tests := []struct {
		method, body string
		code         int
		want         string
	}{
		{http.MethodPost, body, http.StatusOK, `"overallCode":"OK"`},
		{http.MethodPost, body, http.StatusTooManyRequests, `"overallCode":"OVER_LIMIT"`},
		{http.MethodPost, `{"domain": "j"}`, http.StatusBadRequest, "no descriptors"},
		{http.MethodPost, `{"domain": 5}`, http.StatusBadRequest, "not a RateLimitRequest"},
		{http.MethodGet, "", http.StatusMethodNotAllowed, "POST"},
	}
	for i, tt := range tests {
		req, err := http.NewRequest(tt.method, h.URL+"/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.Contains(strings.ReplaceAll(b.String(), " ", ""), strings.ReplaceAll(tt.want, " ", "")) {
			t.Errorf("request %d: got %d %s, want %d and %s", i, resp.StatusCode, b.String(), tt.code, tt.want)
		}
	}
}
