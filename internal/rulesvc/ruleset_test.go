package rulesvc_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/rulesvc"
)

// ops lists changes as "op kind name", in order.
func ops(cs []admin.Change) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Op+" "+c.Kind+" "+c.Name)
	}
	return strings.Join(out, "; ")
}

func TestApplyRuleSetMakesOneVersionWithADiff(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{MaxOverride: 7 * 24 * time.Hour})
	base := r.srv.URL
	var status admin.RolloutStatus
	versions := func() int {
		mustCall(t, base, "GET", "/admin/v1/rollout", nil, 200, &status)
		return len(status.Rollouts)
	}
	// An override exists beside the rule set and must survive it.
	mustCall(t, base, "PUT", "/admin/v1/overrides/key_noisy", map[string]any{"limits": []map[string]any{{"name": "s", "rate": 1, "per": "1s"}},
		"expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "reason": "incident 41"}, 200, nil)

	first := `{"keys": {"key_pro": {"plan": "pro"}}, "endpoints": [{"name": "search", "path": "/v1/search", "cost": 2}],
		"rules": [{"scope": "default", "limits": [{"name": "s", "rate": 10, "per": "1s"}]},
			{"scope": "plan", "match": {"plan": "pro", "endpoint": "search"}, "limits": [{"name": "q", "rate": 5, "per": "1s"}]}]}`
	n0 := versions()
	var res admin.Applied
	mustCall(t, base, "PUT", "/admin/v1/ruleset", first, 200, &res)
	if got, want := ops(res.Changes), "add rule default; add rule plan plan=pro endpoint=search; add key key_pro; add endpoint search"; got != want {
		t.Fatalf("first apply: got changes %q, want %q", got, want)
	}
	if res.Snapshot == nil || res.Hash == "" || res.DryRun {
		t.Fatalf("first apply: got %+v, want a snapshot and a hash", res)
	}
	if got := versions(); got != n0+1 {
		t.Fatalf("first apply: got %d rollouts, want %d: one version for the whole file", got, n0+1)
	}
	var rulesNow struct{ Rules []rulesvc.RuleView }
	mustCall(t, base, "GET", "/admin/v1/rules", nil, 200, &rulesNow)
	ids := map[string]int64{}
	for _, rv := range rulesNow.Rules {
		if !rv.Override && rv.Version != res.Snapshot.Version {
			t.Errorf("rule %d: got version %d, want the apply's %d", rv.ID, rv.Version, res.Snapshot.Version)
		}
		ids[fmt.Sprint(rv.Scope, rv.Override)] = rv.ID
	}

	// The same file again changes nothing and makes no version.
	res = admin.Applied{}
	mustCall(t, base, "PUT", "/admin/v1/ruleset", first, 200, &res)
	if len(res.Changes) != 0 || res.Snapshot != nil {
		t.Fatalf("same file again: got %+v, want no changes and no snapshot", res)
	}
	if got := versions(); got != n0+1 {
		t.Fatalf("same file again: got %d rollouts, want %d", got, n0+1)
	}

	// A new file without keys: the default's limit changes, the plan rule
	// goes, an IP rule comes; keys stay, endpoints are emptied.
	second := `{"endpoints": [], "rules": [{"scope": "default", "limits": [{"name": "s", "rate": 20, "per": "1s"}]},
		{"scope": "ip", "limits": [{"name": "anon", "rate": 2, "per": "1s"}]}]}`
	before := snapshotTables(t, base)
	var dry admin.Applied
	mustCall(t, base, "PUT", "/admin/v1/ruleset?dry_run=true", second, 200, &dry)
	want := "change rule default; remove rule plan plan=pro endpoint=search; add rule ip; remove endpoint search"
	if got := ops(dry.Changes); got != want {
		t.Fatalf("dry run: got changes %q, want %q", got, want)
	}
	if !dry.DryRun || dry.Snapshot != nil {
		t.Fatalf("dry run: got %+v, want dry_run and no snapshot", dry)
	}
	if after := snapshotTables(t, base); after != before {
		t.Fatalf("dry run changed the tables:\nbefore %+v\nafter  %+v", before, after)
	}
	var c0 map[string]any
	if err := json.Unmarshal(dry.Changes[0].After, &c0); err != nil || dry.Changes[0].Rule != ids["defaultfalse"] {
		t.Fatalf("dry run: the changed rule: got %+v (%v), want rule %d", dry.Changes[0], err, ids["defaultfalse"])
	}

	res = admin.Applied{}
	mustCall(t, base, "PUT", "/admin/v1/ruleset", second, 200, &res)
	if got := ops(res.Changes); got != want {
		t.Fatalf("apply: got changes %q, want the dry run's %q", got, want)
	}
	// The hashes differ: the added rule's ID is part of the rule set.
	if res.Hash == "" || res.Snapshot == nil || res.Snapshot.Rollout != "canary" {
		t.Fatalf("apply: got hash %q and snapshot %+v, want a hash and a canary", res.Hash, res.Snapshot)
	}
	if got := versions(); got != n0+2 {
		t.Fatalf("apply: got %d rollouts, want %d", got, n0+2)
	}
	mustCall(t, base, "GET", "/admin/v1/rules", nil, 200, &rulesNow)
	var scopes []string
	for _, rv := range rulesNow.Rules {
		scopes = append(scopes, fmt.Sprint(rv.Scope, rv.Override))
		if rv.Scope == "default" && rv.ID != ids["defaultfalse"] {
			t.Errorf("the changed default rule: got ID %d, want it kept, %d", rv.ID, ids["defaultfalse"])
		}
	}
	if got, want := strings.Join(scopes, " "), "keytrue defaultfalse ipfalse"; got != want {
		t.Errorf("rules after: got %q, want %q (the override kept)", got, want)
	}
	mustCall(t, base, "GET", "/admin/v1/keys/key_pro", nil, 200, nil)
	var audit struct{ Entries []admin.AuditEntry }
	mustCall(t, base, "GET", "/admin/v1/audit?limit=1", nil, 200, &audit)
	if len(audit.Entries) != 1 || audit.Entries[0].Action != "ruleset.apply" || audit.Entries[0].Who != "alice" {
		t.Errorf("audit: got %+v, want one ruleset.apply by alice", audit.Entries)
	}
}

func TestApplyRuleSetRefusesBadFilesAndChangesNothing(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{})
	base := r.srv.URL
	seed(t, base)
	before := snapshotTables(t, base)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		name, token, path, body string
		wantStatus              int
		wantField               string
	}{
		{"read token", readToken, "/admin/v1/ruleset", `{"rules": []}`, 403, "Authorization"},
		{"no rules section", writeToken, "/admin/v1/ruleset", `{"keys": {}}`, 400, "rules"},
		{"unknown field", writeToken, "/admin/v1/ruleset", `{"rules": [], "rule": []}`, 400, "rule"},
		{"bad dry_run", writeToken, "/admin/v1/ruleset?dry_run=maybe", `{"rules": []}`, 400, "dry_run"},
		{"unknown id", writeToken, "/admin/v1/ruleset", `{"rules": [{"id": 999, "scope": "default", "limits": [{"name": "s", "rate": 1, "per": "1s"}]}]}`, 400, "rules[0].id"},
		{"expired", writeToken, "/admin/v1/ruleset", `{"rules": [{"scope": "default", "expires_at": "` + past + `", "limits": [{"name": "s", "rate": 1, "per": "1s"}]}]}`, 400, "rules[0].expires_at"},
		{"endpoint twice", writeToken, "/admin/v1/ruleset", `{"endpoints": [{"name": "a", "path": "/a"}, {"name": "a", "path": "/b"}], "rules": []}`, 400, "endpoints[1].name"},
		{"does not compile", writeToken, "/admin/v1/ruleset", `{"rules": [{"scope": "plan", "match": {"plan": "pro", "endpoint": "nowhere"}, "limits": [{"name": "s", "rate": 1, "per": "1s"}]}]}`, 422, ""},
		{"dry run that does not compile", writeToken, "/admin/v1/ruleset?dry_run=1", `{"rules": [{"scope": "default", "limits": []}]}`, 422, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, raw := call(t, base, tt.token, "PUT", tt.path, tt.body, nil)
			var e struct{ Error, Field string }
			_ = json.Unmarshal([]byte(raw), &e)
			if code != tt.wantStatus || (tt.wantField != "" && e.Field != tt.wantField) || e.Error == "" {
				t.Errorf("got %d %s, want %d with field %q", code, raw, tt.wantStatus, tt.wantField)
			}
		})
	}
	if after := snapshotTables(t, base); after != before {
		t.Fatalf("a refused file changed the tables:\nbefore %+v\nafter  %+v", before, after)
	}
}
