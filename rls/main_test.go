package rls_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rls"
)

// One Redis Cluster serves the package's tests; each keeps apart by a
// domain of its own. Tests that break Redis start their own server.
var cluster *redistest.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, stop, err := redistest.NewCluster(3, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rls tests:", err)
		return 1
	}
	defer stop()
	cluster = c
	return m.Run()
}

// clusterStore is the production decision stack on the package's cluster,
// under a key prefix of the test's own, so that reruns start afresh. Its
// deadlines are long enough for a loaded test machine, so that every
// answer is the cluster's, never the local fallback's.
func clusterStore(t testing.TB) limit.Store {
	t.Helper()
	return pipelineStore(t, cluster.Addrs(), pipeline.Config{
		Redis: redisstore.Config{Prefix: fmt.Sprintf("t%d:", time.Now().UnixNano())},
		Guard: guard.Config{Timeout: 2 * time.Second, DownAfter: 2 * time.Second, MaxQueue: 5 * time.Second},
	})
}

// pipelineStore is the gateway's decision stack over the Redis at addrs,
// tuned by cfg: leases over the guard over redisstore.
func pipelineStore(t testing.TB, addrs []string, cfg pipeline.Config) limit.Store {
	t.Helper()
	cfg.Redis.Addrs = addrs
	if cfg.Fleet.IsZero() {
		cfg.Fleet.Gateways = 1
	}
	p, err := pipeline.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// server is a Service on a real gRPC server on loopback, and a client of it
// built from go-control-plane's generated types.
type server struct {
	svc    *rls.Service
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	reg    *prometheus.Registry
	addr   string
}

// serve starts the service for config over store.
func serve(t testing.TB, config string, store limit.Store) *server {
	t.Helper()
	rules, warnings, err := rls.ParseRules("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warnings {
		t.Logf("warning: %s", w)
	}
	return serveRules(t, rules, store)
}

func serveRules(t testing.TB, rules rls.RuleSource, store limit.Store) *server {
	t.Helper()
	reg := prometheus.NewRegistry()
	svc, err := rls.New(rls.Config{Store: store, Rules: rules, Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := rls.NewGRPCServer(svc, false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { g.Serve(ln); close(done) }()
	t.Cleanup(func() { g.Stop(); <-done })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &server{svc: svc, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, reg: reg, addr: ln.Addr().String()}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one request and fails the test on a gRPC error.
func (s *server) ask(t testing.TB, domain string, hits uint32, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// answer returns the overall code and each descriptor's, as "OK OVER_LIMIT ...".
func answer(resp *rlsv3.RateLimitResponse) string {
	s := resp.GetOverallCode().String() + ":"
	for _, st := range resp.GetStatuses() {
		s += " " + st.GetCode().String()
	}
	return s
}
