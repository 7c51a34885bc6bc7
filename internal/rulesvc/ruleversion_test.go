package rulesvc_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
)

// TestRefusalNamesEachRulesVersion makes two rules of one key in two
// versions and a third change after them, on PostgreSQL, and refuses the
// key at a gateway following the service: the 429 and the decision log
// name the refusing rule's own version (the snapshot that last changed
// it) beside the version the request was checked against, and each
// listed limit its own rule's version; changing one rule moves only its
// version. The rule set applied again as it is changes no version.
func TestRefusalNamesEachRulesVersion(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	mustCall(t, base, "PUT", "/admin/v1/keys/key_v", map[string]any{"plan": "pro"}, 200, nil)
	post := func(rule map[string]any) rulesvc.RuleView {
		var created struct{ After rulesvc.RuleView }
		mustCall(t, base, "POST", "/admin/v1/rules", rule, 201, &created)
		return created.After
	}
	minute := post(map[string]any{"scope": "plan", "match": map[string]any{"plan": "pro"},
		"limits": []map[string]any{{"name": "minute", "rate": 100, "per": "1m"}}})
	hour := post(map[string]any{"scope": "default", "limits": []map[string]any{{"name": "hour", "rate": 2, "per": "1h"}}})
	other := post(map[string]any{"scope": "plan", "match": map[string]any{"plan": "free"},
		"limits": []map[string]any{{"name": "s", "rate": 5, "per": "1s"}}})
	if !(minute.Version < hour.Version && hour.Version < other.Version) {
		t.Fatalf("rule versions %d, %d, %d: want three snapshots in order", minute.Version, hour.Version, other.Version)
	}

	c := startClient(t, base, "gw-v", "eu", rulesync.Config{})
	var log proctest.Buffer
	lim, err := gateway.New(gateway.Config{Rules: c, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func() (int, gateway.Problem) {
		req := httptest.NewRequest("GET", "/v1/items", nil)
		req.Header.Set("X-API-Key", "key_v")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var p gateway.Problem
		json.Unmarshal(rec.Body.Bytes(), &p)
		return rec.Code, p
	}
	check := func(snapshot, minuteVersion int64) {
		t.Helper()
		waitVersion(t, snapshot, c)
		var code int
		var p gateway.Problem
		for range 3 {
			code, p = send()
		}
		if code != 429 || p.Rule == nil {
			t.Fatalf("third request: got %d %+v, want 429 naming a rule", code, p)
		}
		if p.Rule.ID != hour.ID || p.Rule.Version != hour.Version || p.Rule.RulesVersion != snapshot {
			t.Errorf("refusing rule %+v: want rule %d of version %d, checked against rules version %d", *p.Rule, hour.ID, hour.Version, snapshot)
		}
		got := map[string][2]int64{}
		for _, l := range p.Limits {
			got[l.Name] = [2]int64{l.Rule.ID, l.Rule.Version}
		}
		if got["minute"] != [2]int64{minute.ID, minuteVersion} || got["hour"] != [2]int64{hour.ID, hour.Version} {
			t.Errorf("limits' rules %v: want minute of rule %d version %d, hour of rule %d version %d",
				got, minute.ID, minuteVersion, hour.ID, hour.Version)
		}
		if !strings.Contains(p.Detail, "version") {
			t.Errorf("detail %q does not name the rule's version", p.Detail)
		}
	}
	check(other.Version, minute.Version)
	found := false
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var rec struct {
			Outcome      string `json:"outcome"`
			RulesVersion int64  `json:"rules_version"`
			Rule         struct {
				ID      int64 `json:"id"`
				Version int64 `json:"version"`
			} `json:"rule"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Outcome == "refused" {
			found = rec.Rule.ID == hour.ID && rec.Rule.Version == hour.Version && rec.RulesVersion == other.Version
		}
	}
	if !found {
		t.Errorf("decision log lacks the refusal naming rule %d of version %d:\n%s", hour.ID, hour.Version, log.String())
	}

	// Changing the minute rule gives it (alone) the new version; a fresh
	// key's buckets show it.
	var changed struct {
		Snapshot struct{ Version int64 }
		After    rulesvc.RuleView
	}
	mustCall(t, base, "PUT", "/admin/v1/rules/"+strconv.FormatInt(minute.ID, 10), map[string]any{"scope": "plan", "match": map[string]any{"plan": "pro"},
		"limits": []map[string]any{{"name": "minute", "rate": 99, "per": "1m"}}}, 200, &changed)
	if changed.After.Version != changed.Snapshot.Version {
		t.Errorf("changed rule's version %d, want its snapshot's %d", changed.After.Version, changed.Snapshot.Version)
	}
	check(changed.Snapshot.Version, changed.Snapshot.Version)

	// The rule set applied again as the gateway got it (versions and all)
	// changes nothing.
	doc := c.Current().Document()
	if doc.Rules[0].Version == 0 {
		t.Fatalf("snapshot rules %+v: want each with its version", doc.Rules)
	}
	var applied struct{ Changes []json.RawMessage }
	mustCall(t, base, "PUT", "/admin/v1/ruleset", doc, 200, &applied)
	if len(applied.Changes) != 0 {
		t.Errorf("the served rule set applied again: %d changes, want none: %s", len(applied.Changes), applied.Changes)
	}
}
