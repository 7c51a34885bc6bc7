package rulesvc_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/rules"
)

// seed makes a small rule set: a plan, a key on it, an endpoint and a
// default rule. It returns the default rule's ID.
func seed(t *testing.T, base string) int64 {
	t.Helper()
	mustCall(t, base, "PUT", "/admin/v1/keys/key_pro", map[string]any{"plan": "pro", "org": "acme"}, 200, nil)
	mustCall(t, base, "PUT", "/admin/v1/endpoints/search", map[string]any{"method": "GET", "path": "/v1/search", "cost": 2}, 200, nil)
	var created struct {
		After rulesvc.RuleView `json:"after"`
	}
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, 201, &created)
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "plan", "match": map[string]any{"plan": "pro", "endpoint": "search"},
		"limits": []map[string]any{{"name": "search", "rate": 5, "per": "1s", "algorithm": "gcra"}}}, 201, nil)
	return created.After.ID
}

// tableState is what a refused request must leave alone.
type tableState struct {
	Rules, Audit, Rollout string
}

func snapshotTables(t *testing.T, base string) tableState {
	t.Helper()
	var s tableState
	s.Rules = mustCall(t, base, "GET", "/admin/v1/rules", nil, 200, nil)
	s.Audit = mustCall(t, base, "GET", "/admin/v1/audit", nil, 200, nil)
	s.Rollout = mustCall(t, base, "GET", "/admin/v1/rollout", nil, 200, nil)
	return s
}

func TestAdminRefusesBadRequestsAndChangesNothing(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{MaxOverride: 7 * 24 * time.Hour})
	base := r.srv.URL
	defaultID := seed(t, base)
	before := snapshotTables(t, base)

	in := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }
	lim := `[{"name":"s","rate":1,"per":"1s"}]`
	tests := []struct {
		name, token, method, path, body string
		wantStatus                      int
		wantField                       string // the error's field
		wantInError                     string
	}{
		{"no token", "", "POST", "/admin/v1/rules", `{"scope":"default","limits":` + lim + `}`, 401, "Authorization", "missing or unknown"},
		{"unknown token", "not-a-token-at-all-000", "GET", "/admin/v1/rules", "", 401, "Authorization", "missing or unknown"},
		{"read token writes", readToken, "POST", "/admin/v1/rules", `{"scope":"default","limits":` + lim + `}`, 403, "Authorization", "has role read"},
		{"read token overrides", readToken, "PUT", "/admin/v1/overrides/key_pro", `{"limits":` + lim + `,"expires_at":"` + in(time.Hour) + `","reason":"x"}`, 403, "Authorization", "needs write"},
		{"bad JSON", writeToken, "POST", "/admin/v1/rules", `{"scope":`, 400, "", "not valid JSON"},
		{"unknown field", writeToken, "POST", "/admin/v1/rules", `{"scope":"default","limits":` + lim + `,"colour":"red"}`, 400, "colour", "unknown field"},
		{"wrong type", writeToken, "POST", "/admin/v1/rules", `{"scope":"default","limits":[{"name":"s","rate":"ten","per":"1s"}]}`, 400, "limits.rate", `want a rules.Rate, got JSON string "ten"`},
		{"rate in exponent form", writeToken, "POST", "/admin/v1/rules", `{"scope":"plan","match":{"plan":"pro"},"limits":[{"name":"s","rate":1e3,"per":"1s"}]}`, 400, "limits.rate", "write 1000, not 1e3"},
		{"fractional burst", writeToken, "POST", "/admin/v1/rules", `{"scope":"plan","match":{"plan":"pro"},"limits":[{"name":"s","rate":1,"per":"1s","burst":1.5}]}`, 400, "limits.burst", "1.5 is not a whole number of tokens: write 1 or 2"},
		{"fractional cost", writeToken, "PUT", "/admin/v1/endpoints/e", `{"path":"/e","cost":2.5}`, 400, "cost", "write 2 or 3"},
		{"decimal rate of a window", writeToken, "POST", "/admin/v1/rules", `{"scope":"plan","match":{"plan":"pro"},"limits":[{"name":"s","rate":0.5,"per":"1s","algorithm":"fixed_window"}]}`, 422, "limits[0]", "write rate: 1, per: 2s"},
		{"endpoint path with a trailing dot", writeToken, "PUT", "/admin/v1/endpoints/e", `{"path":"/v1/e."}`, 422, "path", "ends in a dot"},
		{"key with a control character", writeToken, "PUT", "/admin/v1/keys/key%0Ax", `{"plan":"pro"}`, 400, "key", "control character 0x0a"},
		{"override of a key with a control character", writeToken, "PUT", "/admin/v1/overrides/key%01x", `{"limits":` + lim + `,"expires_at":"` + in(time.Hour) + `","reason":"INC-1"}`, 400, "key", "control character 0x01"},
		{"override with a blank reason", writeToken, "PUT", "/admin/v1/overrides/key_pro", `{"limits":` + lim + `,"expires_at":"` + in(time.Hour) + `","reason":" \t"}`, 400, "reason", "is required"},
		{"zero rate", writeToken, "POST", "/admin/v1/rules", `{"scope":"plan","match":{"plan":"pro"},"limits":[{"name":"s","rate":0,"per":"1s"}]}`, 422, "limits[0]", "rate 0 must be positive"},
		{"unknown scope", writeToken, "POST", "/admin/v1/rules", `{"scope":"planet","limits":` + lim + `}`, 422, "scope", `"planet" is not one of`},
		{"undeclared endpoint", writeToken, "POST", "/admin/v1/rules", `{"scope":"endpoint","match":{"endpoint":"nope"},"limits":` + lim + `}`, 422, "match.endpoint", "not a declared endpoint"},
		{"duplicate default", writeToken, "POST", "/admin/v1/rules", `{"scope":"default","limits":` + lim + `}`, 422, "match", "already exists"},
		{"replace breaks rule", writeToken, "PUT", fmt.Sprintf("/admin/v1/rules/%d", defaultID), `{"scope":"default","limits":[{"name":"s","rate":1,"per":"0s"}]}`, 422, "limits[0]", "per is missing"},
		{"delete endpoint in use", writeToken, "DELETE", "/admin/v1/endpoints/search", "", 422, "", "not a declared endpoint"},
		{"key without plan", writeToken, "PUT", "/admin/v1/keys/key_x", `{"org":"acme"}`, 422, "plan", "is empty"},
		{"no such rule", writeToken, "DELETE", "/admin/v1/rules/999999", "", 404, "", "no rule 999999"},
		{"override without reason", writeToken, "PUT", "/admin/v1/overrides/key_pro", `{"limits":` + lim + `,"expires_at":"` + in(time.Hour) + `"}`, 400, "reason", "is required"},
		{"override without expiry", writeToken, "PUT", "/admin/v1/overrides/key_pro", `{"limits":` + lim + `,"reason":"INC-1"}`, 400, "expires_at", "every override expires"},
		{"override beyond maximum", writeToken, "PUT", "/admin/v1/overrides/key_pro", `{"limits":` + lim + `,"expires_at":"` + in(8*24*time.Hour) + `","reason":"INC-1"}`, 400, "expires_at", "beyond the longest override"},
		{"override in the past", writeToken, "PUT", "/admin/v1/overrides/key_pro", `{"limits":` + lim + `,"expires_at":"` + in(-time.Minute) + `","reason":"INC-1"}`, 400, "expires_at", "in the past"},
		{"override without limits", writeToken, "PUT", "/admin/v1/overrides/key_pro", `{"expires_at":"` + in(time.Hour) + `","reason":"INC-1"}`, 422, "limits", "at least one limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, raw := call(t, base, tt.token, tt.method, tt.path, tt.body, nil)
			if code != tt.wantStatus {
				t.Fatalf("got status %d, want %d: %s", code, tt.wantStatus, raw)
			}
			var e struct{ Error, Field string }
			if err := json.Unmarshal([]byte(raw), &e); err != nil {
				t.Fatalf("error body %q is not JSON: %v", raw, err)
			}
			if e.Field != tt.wantField {
				t.Errorf("got field %q, want %q (error %q)", e.Field, tt.wantField, e.Error)
			}
			if !strings.Contains(e.Error, tt.wantInError) {
				t.Errorf("got error %q, want it to contain %q", e.Error, tt.wantInError)
			}
		})
	}
	if after := snapshotTables(t, base); after != before {
		t.Errorf("refused requests changed the tables:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestValidateSavesNothing(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{})
	base := r.srv.URL
	seed(t, base)
	before := snapshotTables(t, base)
	var v rulesvc.Validation
	code, raw := call(t, base, readToken, "POST", "/admin/v1/rules/validate",
		`{"scope":"plan","match":{"plan":"pro"},"limits":[{"name":"s","rate":100,"per":"1s"}]}`, &v)
	if code != 200 || !v.Valid || len(v.Hash) != 64 {
		t.Errorf("valid rule: got %d %s, want 200 with valid and a hash", code, raw)
	}
	code, raw = call(t, base, readToken, "POST", "/admin/v1/rules/validate",
		`{"scope":"plan","match":{"plan":"pro"},"limits":[{"name":"s","rate":100,"per":"1s","algorithm":"leaky"}]}`, nil)
	if code != 422 || !strings.Contains(raw, `unknown algorithm`) {
		t.Errorf("invalid rule: got %d %s, want 422 naming the algorithm", code, raw)
	}
	if after := snapshotTables(t, base); after != before {
		t.Errorf("validate changed the tables:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestAuditRecordsWhoAndWhat(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{})
	base := r.srv.URL
	id := seed(t, base)
	mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", id),
		`{"scope":"default","limits":[{"name":"s","rate":20,"per":"1s"}],"reason":"more headroom"}`, 200, nil)
	var audit struct{ Entries []rulesvc.AuditEntry }
	mustCall(t, base, "GET", "/admin/v1/audit?limit=1", nil, 200, &audit)
	if len(audit.Entries) != 1 {
		t.Fatalf("got %d entries, want 1", len(audit.Entries))
	}
	e := audit.Entries[0]
	var before, after rules.Rule
	if err := json.Unmarshal(e.Before, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.After, &after); err != nil {
		t.Fatal(err)
	}
	if e.Who != "alice" || e.Action != "rule.replace" || e.Target != fmt.Sprintf("rules/%d", id) {
		t.Errorf("got who %q action %q target %q, want alice rule.replace rules/%d", e.Who, e.Action, e.Target, id)
	}
	if before.Limits[0].Rate != 10 || after.Limits[0].Rate != 20 || after.Reason != "more headroom" {
		t.Errorf("got before rate %v, after rate %v reason %q; want 10, 20, more headroom",
			before.Limits[0].Rate, after.Limits[0].Rate, after.Reason)
	}
	if e.Version == nil || *e.Version == 0 {
		t.Errorf("got no snapshot version in the audit entry")
	}
}

func TestMigrationsAreIdempotentAcrossReplicas(t *testing.T) {
	t.Parallel()
	schema := newSchema(t)
	// Several replicas starting at once over a new schema.
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			ctx := t.Context()
			svc, err := rulesvc.New(ctx, rulesvc.Config{Postgres: postgresDSN(), Schema: schema, Tokens: testTokens, Logger: testLogger(t)})
			if err == nil {
				svc.Close()
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("replica start: %v", err)
		}
	}
	r := startReplica(t, schema, rulesvc.Config{})
	var st rulesvc.RolloutStatus
	mustCall(t, r.srv.URL, "GET", "/admin/v1/rollout", nil, 200, &st)
	if st.Stable != 1 || len(st.Rollouts) != 1 {
		t.Errorf("got stable version %d and %d rollouts, want the one first snapshot, version 1", st.Stable, len(st.Rollouts))
	}
}

func TestRolloutDecidedByHand(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Window: time.Hour}})
	base := r.srv.URL
	code, raw := call(t, base, writeToken, "POST", "/admin/v1/rollout/halt", `{"reason":"x"}`, nil)
	if code != 409 || !strings.Contains(raw, "no canary is running") {
		t.Errorf("halt with no canary: got %d %s, want 409", code, raw)
	}
	stable := firstRules(t, base)
	var res struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "POST", "/admin/v1/rules", `{"scope":"default","limits":[{"name":"s","rate":1,"per":"1s"}]}`, 201, &res)
	tests := []struct {
		token, body string
		want        int
	}{
		{readToken, `{"reason":"x"}`, 403},
		{writeToken, `{}`, 400},
		{writeToken, `{"reason":"INC-12: refusals up in eu"}`, 200},
		{writeToken, `{"reason":"again"}`, 409},
	}
	for _, tt := range tests {
		if code, raw := call(t, base, tt.token, "POST", "/admin/v1/rollout/halt", tt.body, nil); code != tt.want {
			t.Errorf("halt %s: got %d %s, want %d", tt.body, code, raw, tt.want)
		}
	}
	var st rulesvc.RolloutStatus
	mustCall(t, base, "GET", "/admin/v1/rollout", nil, 200, &st)
	if ro := st.Rollouts[0]; ro.Version != res.Snapshot.Version || ro.State != "halted" || ro.Reason != "halted by alice: INC-12: refusals up in eu" {
		t.Errorf("got rollout %d %s %q, want %d halted by alice with the reason", ro.Version, ro.State, ro.Reason, res.Snapshot.Version)
	}
	if st.Stable != stable {
		t.Errorf("got stable version %d, want %d: a halted version is never promoted", st.Stable, stable)
	}
}

// The admin API takes the bearer scheme in any case (schemes are
// case-insensitive), and rates as users write them: 0.5 a second is kept
// as written and enforced as 1 every 2 seconds.
func TestAdminTakesWhatUsersWrite(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		req, err := http.NewRequest("GET", r.srv.URL+"/admin/v1/rules", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", scheme+" "+readToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("scheme %q: got status %d, want 200", scheme, resp.StatusCode)
		}
	}
	var res struct {
		Snapshot rulesvc.Published
		After    rulesvc.RuleView
	}
	mustCall(t, r.srv.URL, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 0.5, "per": "1s"}}}, 201, &res)
	if got := res.After.Limits[0].Rate; got != 0.5 {
		t.Errorf("got rate %v stored, want 0.5 as written", got)
	}
	c := startClient(t, r.srv.URL, "gw-1", "eu", rulesync.Config{})
	waitVersion(t, res.Snapshot.Version, c)
	l := c.Current().Resolve(time.Now(), rules.Query{APIKey: "anyone"}).Limits[0]
	if l.Count != 1 || l.Period != 2*time.Second {
		t.Errorf("got %d per %v enforced, want 1 per 2s", l.Count, l.Period)
	}
}
