package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// outageRules give every key a generous limit and logins a fail-closed one.
const outageRules = `
endpoints:
  - {name: login, method: POST, path: /v1/login}
rules:
  - scope: default
    limits: [{name: s, rate: 100, per: 1s}]
  - scope: endpoint
    match: {endpoint: login}
    limits: [{name: login, rate: 100, per: 1m}]
    fail_mode: closed
`

// decisionCount is sluice_gateway_decisions_total summed over the series
// matching labels.
func decisionCount(t *testing.T, reg *prometheus.Registry, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "sluice_gateway_decisions_total" {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && lp.GetValue() != want {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func TestFrozenRedisAnswersLocallyAndSaysSo(t *testing.T) {
	// The production stack in process (leases over the guard over a real
	// Redis) with a short deadline and a breaker that opens on the first
	// failure and stays open: freezing the server with SIGSTOP must change
	// nothing a client sees but the source of the answers, which the
	// metrics and the decision log name.
	srv := redistest.Standalone(t)
	set, err := rules.Parse("outage.yaml", []byte(outageRules))
	if err != nil {
		t.Fatal(err)
	}
	src := gateway.StaticRules(set)
	logs := &proctest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	reg := prometheus.NewRegistry()
	// Long enough that a loaded machine never misses it while Redis
	// answers; paid once, by the request that opens the breaker.
	store, err := pipeline.New(t.Context(), pipeline.Config{
		Redis:   redisstore.Config{Addrs: []string{srv.Addr()}},
		Timeout: 250 * time.Millisecond, TripAfter: 1, Pause: time.Minute, Gateways: 1,
		Logger: logger, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	lim, err := gateway.New(gateway.Config{Store: store, Rules: src, Logger: logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(api.Close)
	send := func(method, path, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, api.URL+path, nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}

	if resp := send("GET", "/", "alpha"); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") == "" {
		t.Fatalf("before the outage: status %d RateLimit %q, want 200 and the header", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if got := decisionCount(t, reg, map[string]string{"source": "redis"}); got != 1 {
		t.Fatalf("before the outage: %v decisions from redis, want 1", got)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Cont() }) // before the store's Close, which runs later
	for i := range 5 {
		resp := send("GET", "/", "bravo")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("frozen Redis, request %d: status %d RateLimit %q RateLimit-Policy %q, want 200 and both headers",
				i+1, resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"))
		}
	}
	if resp := send("POST", "/v1/login", "charlie"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("frozen Redis, login: status %d, want 503 (fail_mode closed)", resp.StatusCode)
	} else if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 1 || n > 60 {
		t.Errorf("frozen Redis, login: Retry-After %q, want 1 to 60 seconds (until the breaker's probe)", resp.Header.Get("Retry-After"))
	}

	for _, tt := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"outcome": "allowed", "limit": "s", "source": string(limit.FromLocalFallback)}, 5},
		{map[string]string{"outcome": "error", "source": string(limit.FromFailClosed)}, 1},
		{map[string]string{"source": "redis"}, 1},
	} {
		if got := decisionCount(t, reg, tt.labels); got != tt.want {
			t.Errorf("decisions%v = %v, want %v", tt.labels, got, tt.want)
		}
	}
	// The decision log: a line for bravo's five local answers (one, as
	// they came within a second, unless the machine is very slow), one
	// for charlie's fail-closed refusal, and never a key itself.
	var local, closed int
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch m["source"] {
		case string(limit.FromLocalFallback):
			local++
		case string(limit.FromFailClosed):
			closed++
		}
	}
	if local < 1 || local >= 5 || closed != 1 {
		t.Errorf("log lines from local-fallback %d and fail-closed %d, want 1 (sampled per key) and 1:\n%s", local, closed, logs)
	}
	if l := logs.String(); strings.Contains(l, "bravo") || strings.Contains(l, "charlie") {
		t.Errorf("the log holds an API key:\n%s", logs)
	}
}
