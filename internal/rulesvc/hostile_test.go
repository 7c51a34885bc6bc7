package rulesvc_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/limit"
)

// The tests of this file are what a review found when it tried to break
// the rules service with a gateway token (issue 10).

// schemaConn connects to the test database with schema as search path.
func schemaConn(t *testing.T, schema string) *pgx.Conn {
	t.Helper()
	cc, err := pgx.ParseConfig(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cc.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(t.Context(), cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// poll is one long poll of gateway id with token, answered at once.
func poll(t *testing.T, base, token, id string) (int, string) {
	t.Helper()
	return call(t, base, token, "GET", "/v1/snapshot?wait=0s&gateway="+id, nil, nil)
}

// Gateways made up by a holder of the gateway token, that poll but never
// report, count for nothing: the fleet, and with it every real gateway's
// share of a limit during an outage, stays what it is, and the canary is
// a gateway that reports. A token registers a bounded number of gateways,
// and cannot poll as another token's gateway.
func TestMadeUpGatewaysDoNotCount(t *testing.T) {
	t.Parallel()
	const small = "small-token-0123456789"
	tokens := append([]rulesvc.Token{{Name: "small", Secret: small, Role: rulesvc.RoleGateway, MaxGateways: 3}}, testTokens...)
	r := startReplica(t, newSchema(t), rulesvc.Config{Tokens: tokens, Refresh: 100 * time.Millisecond,
		Canary: rulesvc.Canary{Window: time.Hour}})
	base := r.srv.URL
	firstRules(t, base)
	real := startClient(t, base, "gw-real", "eu", rulesync.Config{})
	waitFleet(t, base, 1)
	for i := range 40 {
		if code, raw := poll(t, base, gatewayToken, fmt.Sprintf("made-up-%d", i)); code != 200 {
			t.Fatalf("poll of made-up-%d: got %d %s", i, code, raw)
		}
	}
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, 201, &res)
	if ro := rolloutOf(t, base, res.Snapshot.Version); fmt.Sprint(ro.Canaries) != "[gw-real]" {
		t.Errorf("got canaries %v, want [gw-real], the one gateway that reports", ro.Canaries)
	}
	time.Sleep(300 * time.Millisecond) // a few refreshes
	if f := real.FleetSize(); f.Total != 1 {
		t.Errorf("got a fleet of %d after 40 made-up gateways polled, want 1", f.Total)
	}

	// A token with max_gateways 3 registers three, and no fourth.
	for i := range 4 {
		code, raw := poll(t, base, small, fmt.Sprintf("small-%d", i))
		if want := map[bool]int{true: 200, false: 403}[i < 3]; code != want {
			t.Errorf("poll %d with a token of max_gateways 3: got %d, want %d: %s", i, code, want, raw)
		}
		if i == 3 && !strings.Contains(raw, "token small already has 3 gateways registered") {
			t.Errorf("refusal %s does not say why", raw)
		}
	}
	// Nor can it poll or report as the other token's gateway.
	if code, raw := poll(t, base, small, "gw-real"); code != 403 || !strings.Contains(raw, "another token") {
		t.Errorf("poll as another token's gateway: got %d %s, want 403", code, raw)
	}
	if code, raw := call(t, base, small, "POST", "/v1/report", `{"gateway":"gw-real","versions":[]}`, nil); code != 403 {
		t.Errorf("report as another token's gateway: got %d %s, want 403", code, raw)
	}
}

// A gateway that stopped polling leaves the table after the retention.
func TestGatewaysUnseenAreDropped(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	r := startReplica(t, schema, rulesvc.Config{PollTimeout: 200 * time.Millisecond, GatewayTTL: 500 * time.Millisecond,
		GatewayRetention: 500 * time.Millisecond, Refresh: 100 * time.Millisecond})
	for i := range 5 {
		if code, raw := poll(t, r.srv.URL, gatewayToken, fmt.Sprintf("gw-%d", i)); code != 200 {
			t.Fatalf("got %d %s", code, raw)
		}
	}
	conn := schemaConn(t, schema)
	eventually(t, 10*time.Second, "the gateways table empty", func() bool {
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM gateways").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// One gateway cannot flood the service with reports.
func TestReportRateIsBounded(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{ReportRate: 1})
	base := r.srv.URL
	if code, raw := poll(t, base, gatewayToken, "gw-1"); code != 200 {
		t.Fatalf("got %d %s", code, raw)
	}
	var codes []int
	for range 8 {
		code, _ := call(t, base, gatewayToken, "POST", "/v1/report", `{"gateway":"gw-1","versions":[{"version":1,"requests":1}]}`, nil)
		codes = append(codes, code)
	}
	// A burst of five, then refused until the bucket refills at one a
	// second (the eight reports take far less than a second).
	if got := fmt.Sprint(codes); !strings.HasPrefix(got, "[204 204 204 204 204 429") {
		t.Errorf("got statuses %s, want five accepted, then 429", got)
	}
}

// Rows whose counts add up beyond an int64 (stored before the bounds on
// reports, or through the database) cannot break the admin API's reads.
func TestOverflowingSumsSaturate(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	r := startReplica(t, schema, rulesvc.Config{Canary: rulesvc.Canary{Window: time.Hour}})
	base := r.srv.URL
	stable := firstRules(t, base)
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, 201, &res)
	conn := schemaConn(t, schema)
	const big = int64(1) << 62
	for _, gw := range []string{"gw-a", "gw-b"} {
		// Gateways outside the canary (there is none), reporting the
		// stable version: the rest.
		if _, err := conn.Exec(t.Context(), `INSERT INTO decisions (gateway, version, requests, refused) VALUES ($1, $2, $3, $3)`,
			gw, stable, big); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(t.Context(), `INSERT INTO shadow_hits (rule_id, version, gateway, key, hits) VALUES (1, $1, $2, 'k:x', $3)`,
			res.Snapshot.Version, gw, big); err != nil {
			t.Fatal(err)
		}
	}
	ro := rolloutOf(t, base, res.Snapshot.Version)
	if ro.Rest == nil || ro.Rest.Requests != math.MaxInt64 {
		t.Errorf("got rest counts %+v, want requests saturated at %d", ro.Rest, int64(math.MaxInt64))
	}
	var sh struct{ Rules []rulesvc.ShadowRule }
	mustCall(t, base, "GET", "/admin/v1/shadow", nil, 200, &sh)
	if len(sh.Rules) != 1 || sh.Rules[0].WouldRefuse != math.MaxInt64 || sh.Rules[0].TopKeys[0].Count != math.MaxInt64 {
		t.Errorf("got shadow rules %+v, want one with every sum saturated", sh.Rules)
	}
}

// A shadow report keeps keys as sent only when the operator opts in.
func TestShadowRawKeysOnlyByChoice(t *testing.T) {
	t.Parallel()
	for _, raw := range []bool{false, true} {
		r := startReplica(t, newSchema(t), rulesvc.Config{ShadowRawKeys: raw})
		base := r.srv.URL
		if code, body := poll(t, base, gatewayToken, "gw-1"); code != 200 {
			t.Fatalf("got %d %s", code, body)
		}
		mustCallToken(t, base, gatewayToken, "POST", "/v1/report", `{"gateway":"gw-1","versions":[{"version":1,"shadow":[
			{"rule":7,"would_refuse":3,"top_keys":[{"key":"k:secret_key","count":2},{"key":"ip:192.0.2.1","count":1}]}]}]}`, 204)
		var sh struct{ Rules []rulesvc.ShadowRule }
		mustCall(t, base, "GET", "/admin/v1/shadow", nil, 200, &sh)
		want := fmt.Sprint([]rulesapi.KeyCount{{Key: keyhash.Of("k:secret_key"), Count: 2}, {Key: keyhash.Of("ip:192.0.2.1"), Count: 1}})
		if raw {
			want = fmt.Sprint([]rulesapi.KeyCount{{Key: "k:secret_key", Count: 2}, {Key: "ip:192.0.2.1", Count: 1}})
		}
		if len(sh.Rules) != 1 || fmt.Sprint(sh.Rules[0].TopKeys) != want {
			t.Errorf("raw keys %v: got %+v, want top keys %s", raw, sh.Rules, want)
		}
	}
}

// mustCallToken is mustCall with another token.
func mustCallToken(t *testing.T, base, token, method, path string, body any, want int) {
	t.Helper()
	if code, raw := call(t, base, token, method, path, body, nil); code != want {
		t.Fatalf("%s %s: got status %d, want %d: %s", method, path, code, want, raw)
	}
}

// A canary that refuses requests no limit applied to before is compared
// with the rest, since those requests are counted too, and halted.
func TestCanaryRefusingUnlimitedTrafficIsHalted(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Refresh: 100 * time.Millisecond, Canary: rulesvc.Canary{
		Fraction: 0.25, Window: 20 * time.Second, Threshold: 0.2, MinSample: 30, Check: 100 * time.Millisecond}})
	base := r.srv.URL
	firstRules(t, base)
	var cs []*rulesync.Client
	for i := range 4 {
		cs = append(cs, startClient(t, base, fmt.Sprintf("gw-%d", i), "eu", rulesync.Config{}))
	}
	waitFleet(t, base, 4)
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "ip",
		"limits": []map[string]any{{"name": "ip", "rate": 1, "per": "1h"}}}, 201, &res)
	v := res.Snapshot.Version
	ro := rolloutOf(t, base, v)
	if len(ro.Canaries) != 1 {
		t.Fatalf("got canaries %v, want 1", ro.Canaries)
	}
	// What the gateways decide: the canary refuses every request under its
	// new ip limit; the rest apply no limit at all, which the gateway
	// reports as an enforced event without limits.
	lims := []limit.Limit{{Name: "ip", Count: 1, Period: time.Hour}}
	for i, c := range cs {
		canary := fmt.Sprintf("gw-%d", i) == ro.Canaries[0]
		if canary {
			waitVersion(t, v, c)
		}
		for range 50 {
			if canary {
				c.Observe(rulesync.Outcome{Key: "ip:192.0.2.1", Limits: lims, Version: v})
			} else {
				c.Observe(rulesync.Outcome{Key: "ip:192.0.2.1", Version: version(c), Decision: limit.Decision{Allowed: true}})
			}
		}
	}
	eventually(t, 15*time.Second, "the rollout decided", func() bool { return rolloutOf(t, base, v).State != "canary" })
	if ro := rolloutOf(t, base, v); ro.State != "halted" || ro.Compared == nil || !*ro.Compared {
		t.Errorf("got state %q compared %v reason %q, want halted after a comparison", ro.State, ro.Compared, ro.Reason)
	}
}

// A canary nobody reported enough requests for is promoted at the end of
// its window, never silently: the rollout and the audit log say it was
// not compared.
func TestUncomparedCanaryIsPromotedLoudly(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Refresh: 100 * time.Millisecond, Canary: rulesvc.Canary{
		Window: time.Second, MinSample: 1000, Check: 100 * time.Millisecond}})
	base := r.srv.URL
	firstRules(t, base)
	startClient(t, base, "gw-1", "eu", rulesync.Config{})
	waitFleet(t, base, 1)
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, 201, &res)
	v := res.Snapshot.Version
	eventually(t, 10*time.Second, "the rollout decided", func() bool { return rolloutOf(t, base, v).State != "canary" })
	ro := rolloutOf(t, base, v)
	if ro.State != "promoted" || ro.Compared == nil || *ro.Compared || !strings.Contains(ro.Reason, "WITHOUT COMPARISON") {
		t.Errorf("got state %q compared %v reason %q, want promoted, compared false, and a reason that says so",
			ro.State, ro.Compared, ro.Reason)
	}
	var audit struct{ Entries []rulesvc.AuditEntry }
	mustCall(t, base, "GET", "/admin/v1/audit", nil, 200, &audit)
	found := false
	for _, e := range audit.Entries {
		if e.Action == "rollout.promoted" && e.Version != nil && *e.Version == v {
			found = strings.Contains(string(e.After), `"compared":false`)
		}
	}
	if !found {
		t.Errorf("no audit entry of the promotion of %d with compared false: %+v", v, audit.Entries)
	}
}

// A gateway left on a halted canary is sent back with the rollback mark;
// any other older version is not marked, and the client refuses it.
func TestHaltedCanaryIsARollback(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Window: time.Hour}})
	base := r.srv.URL
	stable := firstRules(t, base)
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, 201, &res)
	mustCall(t, base, "POST", "/admin/v1/rollout/halt", map[string]any{"reason": "test"}, 200, nil)
	snapshot := func(after int64) rulesapi.Snapshot {
		var sn rulesapi.Snapshot
		code, raw := call(t, base, gatewayToken, "GET", fmt.Sprintf("/v1/snapshot?wait=0s&gateway=gw-1&after=%d", after), nil, &sn)
		if code != http.StatusOK {
			t.Fatalf("after=%d: got %d %s", after, code, raw)
		}
		return sn
	}
	if sn := snapshot(res.Snapshot.Version); sn.Version != stable || !sn.Rollback {
		t.Errorf("from the halted version: got version %d rollback %v, want %d and a rollback", sn.Version, sn.Rollback, stable)
	}
	if sn := snapshot(res.Snapshot.Version + 5); sn.Rollback {
		t.Errorf("from a version the service never withdrew: got a rollback mark")
	}
	if sn := snapshot(0); sn.Rollback {
		t.Errorf("a newer version marked a rollback")
	}
}

// Gateways registered before gateway tokens (by an older service, with no
// token) keep polling under the token they now send.
func TestGatewaysWithoutTokenAreClaimed(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	r := startReplica(t, schema, rulesvc.Config{})
	conn := schemaConn(t, schema)
	if _, err := conn.Exec(t.Context(), `INSERT INTO gateways (id, region, last_seen) VALUES ('gw-old', 'eu', now())`); err != nil {
		t.Fatal(err)
	}
	if code, raw := poll(t, r.srv.URL, gatewayToken, "gw-old"); code != 200 {
		t.Errorf("poll of a gateway registered without a token: got %d %s, want 200", code, raw)
	}
}
