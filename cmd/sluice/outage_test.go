package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/guard"
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
		Redis: redisstore.Config{Addrs: []string{srv.Addr()}},
		Guard: guard.Config{Timeout: 250 * time.Millisecond, TripAfter: 1, Pause: time.Minute}, Fleet: limit.Fleet{Gateways: 1},
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

// scrapeDecisions is sluice_gateway_decisions_total summed over the series
// of source src, read from a running gateway's /metrics.
func scrapeDecisions(t *testing.T, metricsURL string, src limit.Source) float64 {
	t.Helper()
	_, body := get(t, "GET", metricsURL+"/metrics")
	var sum float64
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "sluice_gateway_decisions_total{") || !strings.Contains(line, `source="`+string(src)+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestGatewayStartsWithRedisDown starts a gateway process while its Redis
// is stopped: it serves under local limits (fail-closed limits refuse),
// /readyz says degraded and names the node, /healthz stays 200; once
// Redis is started on that port the gateway connects by itself, its
// decisions are shared again and /readyz is 200, with no restart.
func TestGatewayStartsWithRedisDown(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	rulesFile := writeFile(t, "rules.yaml", outageRules)
	gw := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--rules", rulesFile, "--redis", srv.Addr(), "--gateways", "1", "--breaker-pause", "200ms")

	for i := range 3 {
		if resp, _ := get(t, "GET", gw.URL+"/", "X-API-Key", "alpha"); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") == "" {
			t.Errorf("Redis down, request %d: status %d RateLimit %q, want 200 and the header", i+1, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	if resp, body := get(t, "POST", gw.URL+"/v1/login", "X-API-Key", "alpha"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("Redis down, login: status %d %s, want 503 (fail_mode closed)", resp.StatusCode, body)
	}
	if got := scrapeDecisions(t, gw.MetricsURL, limit.FromLocalFallback); got != 3 {
		t.Errorf("Redis down: %v decisions from local-fallback, want 3", got)
	}
	for _, u := range []string{gw.URL, gw.MetricsURL} {
		if resp, body := get(t, "GET", u+"/readyz"); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, srv.Addr()) || !strings.Contains(body, "degraded") {
			t.Errorf("Redis down: %s/readyz answered %d %s, want 503 degraded naming %s", u, resp.StatusCode, body, srv.Addr())
		}
	}
	if resp, body := get(t, "GET", gw.URL+"/healthz"); resp.StatusCode != http.StatusOK {
		t.Errorf("Redis down: /healthz answered %d %s, want 200: the process is alive", resp.StatusCode, body)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	deadline := back.Add(20 * time.Second)
	for scrapeDecisions(t, gw.MetricsURL, limit.FromRedis) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no decision from redis 20s after Redis came back")
		}
		get(t, "GET", gw.URL+"/", "X-API-Key", "bravo")
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("decisions shared again %v after Redis came back", time.Since(back).Round(10*time.Millisecond))
	if resp, _ := get(t, "POST", gw.URL+"/v1/login", "X-API-Key", "bravo"); resp.StatusCode != http.StatusOK {
		t.Errorf("Redis back, login: status %d, want 200", resp.StatusCode)
	}
	// Readiness is read at most every half second: it may lag a little.
	for {
		resp, body := get(t, "GET", gw.URL+"/readyz")
		if resp.StatusCode == http.StatusOK && strings.Contains(body, `"ready"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis back: /readyz answered %d %s, want 200 ready", resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := srv.Do(t.Context(), "DBSIZE"); err != nil || n.(int64) < 1 {
		t.Errorf("Redis back: DBSIZE %v, %v; want the gateway's buckets", n, err)
	}
}

// TestGatewayTLSToPlaintextPort points rediss:// at a plaintext Redis
// port: the gateway does not start, and says which address and why,
// within seconds rather than hanging in the TLS handshake.
func TestGatewayTLSToPlaintextPort(t *testing.T) {
	srv := redistest.Standalone(t)
	start := time.Now()
	code, _, stderr := sluice.Run(t, "gateway", "--listen", "127.0.0.1:0", "--redis", "rediss://"+srv.Addr())
	took := time.Since(start)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	for _, want := range []string{"--redis", srv.Addr(), "TLS handshake", "plaintext"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	// A generous bound, not a measurement: before, this start hung for ever.
	if took > 15*time.Second {
		t.Errorf("the gateway took %v to give up, want seconds", took)
	}
}

// TestSIGTERMWhileConnecting stops a gateway during its first connection
// attempt, while a server that accepts and never answers holds its TLS
// handshake: the gateway exits at once, before the attempt gives up, with
// status 0.
func TestSIGTERMWhileConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	bin, err := sluice.Path()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--redis", "rediss://"+ln.Addr().String())
	var stderr proctest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	// The gateway has connected and sent its ClientHello: it waits on the
	// handshake.
	var conn net.Conn
	select {
	case conn = <-accepted:
		defer conn.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway never connected")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d (%v), want 0\nstderr:\n%s", code, err, stderr.String())
	}
	if l := stderr.String(); strings.Contains(l, "unreachable at start") || !strings.Contains(l, "stopped while connecting") {
		t.Errorf("the gateway did not stop during its first attempt:\n%s", l)
	}
}

// TestRLSHealthFollowsRedis starts sluice rls while its Redis is stopped:
// it serves, its gRPC health (grpc.health.v1) says NOT_SERVING and its
// /readyz names the node; once Redis is started on that port, health says
// SERVING, with no restart.
func TestRLSHealthFollowsRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	config := writeFile(t, "edge.yaml", rlsConfig)
	p := sluice.Start(t, "rls", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--config", config,
		"--redis", srv.Addr(), "--gateways", "1")
	conn := dialRLS(t, p)
	health := healthpb.NewHealthClient(conn)
	waitHealth := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			for _, svc := range []string{"envoy.service.ratelimit.v3.RateLimitService", ""} {
				h, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
				if err == nil && h.GetStatus() == want {
					if svc == "" {
						return
					}
					continue
				}
				if time.Now().After(deadline) {
					t.Fatalf("health of %q: got %v, %v; want %v", svc, h, err, want)
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit while Redis is down: got %v, %v; want OK from the local limits", resp, err)
	}
	httpURL := regexp.MustCompile(`(http://\S+)`).FindStringSubmatch(p.Stdout())
	if httpURL == nil {
		t.Fatalf("stdout %q names no HTTP address", p.Stdout())
	}
	if r, body := get(t, "GET", httpURL[1]+"/readyz"); r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, srv.Addr()) {
		t.Errorf("/readyz while Redis is down: %d %s, want 503 naming %s", r.StatusCode, body, srv.Addr())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealth(healthpb.HealthCheckResponse_SERVING)
}

// dialRLS connects a gRPC client to the rls process p, which printed
// where it serves gRPC; the test's cleanup closes it.
func dialRLS(t *testing.T, p *proctest.Process) *grpc.ClientConn {
	t.Helper()
	m := regexp.MustCompile(`grpc://(\S+)`).FindStringSubmatch(p.Stdout())
	if m == nil {
		t.Fatalf("stdout %q names no gRPC address", p.Stdout())
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
