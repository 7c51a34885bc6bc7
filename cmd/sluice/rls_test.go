package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/redistest"
)

const rlsConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
`

func TestRLSServesEnvoyOverRedis(t *testing.T) {
	config := writeFile(t, "edge.yaml", rlsConfig)
	redis := redistest.Standalone(t)
	p := sluice.Start(t, "rls", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--config", config,
		"--redis", redis.Addr(), "--redis-timeout", "2s", "--redis-down-after", "2s", "--max-queue", "5s", "--gateways", "1",
		"--reload-every", "20ms", "--max-connection-age", "1m")
	conn := dialRLS(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: got %v, %v; want SERVING", h, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection without --grpc-reflection: got %v, want UNIMPLEMENTED", err)
	}

	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(ip string) string {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}},
		}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetOverallCode().String()
	}
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		if got := ask("10.0.0.1"); got != want {
			t.Errorf("request %d: got %s, want %s", i, got, want)
		}
	}
	resp, err := http.Post(p.URL+"/json", "application/json", strings.NewReader(`{"descriptors": [{"entries": [{"key": "k"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "domain is empty") {
		t.Errorf("JSON request without a domain: got %d %q, want 400 naming the empty domain", resp.StatusCode, body)
	}
	if _, body := get(t, "GET", p.URL+"/metrics"); !strings.Contains(body, `sluice_rls_over_limit_total{descriptor="remote_address",domain="edge"} 1`) {
		t.Errorf("metrics lack the refusal:\n%s", body)
	}

	// A bad edit keeps the rules in force; a good one takes over.
	if err := os.WriteFile(config, []byte("domain: edge\ndescriptors: [{key: remote_address, rate_limit: {unit: hour}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(p.Stderr(), "rls config not reloaded") })
	if got := ask("10.0.0.2"); got != "OK" {
		t.Errorf("after a bad edit: got %s, want OK under the old rules", got)
	}
	if err := os.WriteFile(config, []byte(strings.Replace(rlsConfig, "requests_per_unit: 2", "requests_per_unit: 0", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Count(p.Stderr(), "rls config loaded") >= 2 })
	if got := ask("10.0.0.3"); got != "OVER_LIMIT" {
		t.Errorf("after blocking every address: got %s, want OVER_LIMIT", got)
	}

	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d, want 0", code)
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRLSUsage(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "domain: d\ndescriptors: [{value: v}]\n")
	testUsage(t, []usageTest{
		{[]string{"rls"}, 2, "--config is required"},
		{[]string{"rls", "--config", bad}, 1, "bad.yaml:2: descriptor has no key"},
		{[]string{"rls", "--config", "/nonexistent"}, 1, "no such file"},
	})
}
