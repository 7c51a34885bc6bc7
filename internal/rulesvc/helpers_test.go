package rulesvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/rulesvc"
)

const (
	readToken    = "read-token-0123456789"
	writeToken   = "write-token-0123456789"
	gatewayToken = "gateway-token-0123456789"
)

var testTokens = []rulesvc.Token{
	{Name: "alice", Secret: writeToken, Role: rulesvc.RoleWrite},
	{Name: "bob", Secret: readToken, Role: rulesvc.RoleRead},
	{Name: "gateways", Secret: gatewayToken, Role: rulesvc.RoleGateway},
}

// postgresDSN is the test database; a test fails, never skips, without it.
func postgresDSN() string { return pgtest.DSN() }

// newSchema returns the name of a fresh schema for one test, dropped when
// the test ends. The service creates it.
func newSchema(t *testing.T) string { return pgtest.Schema(t, "sluice_test_") }

// replica is one running service replica.
type replica struct {
	svc  *rulesvc.Service
	srv  *httptest.Server
	stop func()
}

// startReplica starts a service replica over schema and serves it; the
// test's cleanup stops it. cfg's Postgres, Schema, Tokens and Logger are
// filled in when empty.
func startReplica(t *testing.T, schema string, cfg rulesvc.Config) *replica {
	t.Helper()
	return startReplicaDSN(t, postgresDSN(), schema, cfg)
}

// startReplicaDSN is startReplica over the database at dsn.
func startReplicaDSN(t *testing.T, dsn, schema string, cfg rulesvc.Config) *replica {
	t.Helper()
	cfg.Postgres, cfg.Schema = dsn, schema
	if cfg.Tokens == nil {
		cfg.Tokens = testTokens
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.ReportRate == 0 {
		// Test clients report every 100 ms; tests of the report rate set
		// their own.
		cfg.ReportRate = 50
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := rulesvc.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Run(ctx)
	}()
	srv := httptest.NewServer(svc.Handler())
	r := &replica{svc: svc, srv: srv}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		srv.CloseClientConnections()
		srv.Close()
		svc.Close()
	}
	t.Cleanup(r.stop)
	return r
}

// testLogger logs to the test, and only while it runs.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// call sends a JSON request with a bearer token and decodes the answer into
// out when out is not nil; it returns the status and the raw body.
func call(t *testing.T, base, token, method, path string, body any, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, string(raw)
}

// mustCall is call that fails the test unless the status is want.
func mustCall(t *testing.T, base, method, path string, body any, want int, out any) string {
	t.Helper()
	code, raw := call(t, base, writeToken, method, path, body, out)
	if code != want {
		t.Fatalf("%s %s: got status %d, want %d: %s", method, path, code, want, raw)
	}
	return raw
}

// eventually polls cond every 10 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// firstRules gives the service its first rules, a limit of a key no test
// request sends, which it promotes at once (there is nothing to compare a
// canary with), so that the test's own change goes through a canary. It
// returns the version, then the stable one.
func firstRules(t *testing.T, base string) int64 {
	t.Helper()
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "key", "match": map[string]any{"key": "k_first_rules"},
		"limits": []map[string]any{{"name": "first", "rate": 1000, "per": "1s"}}}, 201, &res)
	if res.Snapshot.Rollout != "promoted" {
		t.Fatalf("first rules: got rollout %q, want promoted at once", res.Snapshot.Rollout)
	}
	return res.Snapshot.Version
}
