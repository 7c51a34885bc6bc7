package rulesvc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/rules"
)

// TestRefusalsAndCostHeaderAreStored checks that a rule's refusals and an
// endpoint's cost_header, made through the admin API and through PUT
// /admin/v1/ruleset, are stored, read back and reach a gateway's compiled
// rules, and that bad values are refused naming the field.
func TestRefusalsAndCostHeaderAreStored(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	c := startClient(t, base, "gw-1", "eu", rulesync.Config{})
	lim := []map[string]any{{"name": "s", "rate": 1, "per": "1s"}}

	// gateway resolves a request to endpoint ep at version v.
	gateway := func(v int64, ep string) rules.Resolution {
		t.Helper()
		waitVersion(t, v, c)
		return c.Current().Resolve(time.Now(), rules.Query{APIKey: "anyone", Endpoint: ep})
	}
	check := func(how string, res rules.Resolution, header string, refusals rules.Refusals) {
		t.Helper()
		if res.CostHeader != header {
			t.Errorf("%s: gateway's cost header %q, want %q", how, res.CostHeader, header)
		}
		if len(res.Rules) != 1 || res.Rules[0].Refusals != refusals {
			t.Errorf("%s: gateway's rules %+v, want one with refusals %q", how, res.Rules, refusals)
		}
	}

	// Through the admin API.
	var put struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "PUT", "/admin/v1/endpoints/export", map[string]any{"path": "/v1/export", "cost": 10, "cost_header": "X-Cost"}, 200, nil)
	var created struct {
		Snapshot rulesvc.Published
		After    rulesvc.RuleView
	}
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "endpoint", "match": map[string]any{"endpoint": "export"},
		"refusals": "count", "limits": lim}, 201, &created)
	var ep rules.Endpoint
	mustCall(t, base, "GET", "/admin/v1/endpoints/export", nil, 200, &ep)
	if ep.CostHeader != "X-Cost" || ep.Cost != 10 {
		t.Errorf("GET endpoint: %+v, want cost 10 and cost_header X-Cost", ep)
	}
	id := created.After.ID
	var view rulesvc.RuleView
	mustCall(t, base, "GET", fmt.Sprintf("/admin/v1/rules/%d", id), nil, 200, &view)
	if view.Refusals != rules.RefusalsCount || created.After.Refusals != rules.RefusalsCount {
		t.Errorf("rule %d: created %q, GET %q, want refusals count", id, created.After.Refusals, view.Refusals)
	}
	if raw := mustCall(t, base, "GET", "/admin/v1/rules", nil, 200, nil); !strings.Contains(raw, `"refusals":"count"`) {
		t.Errorf("GET rules lacks the refusals: %s", raw)
	}
	check("admin API", gateway(created.Snapshot.Version, "export"), "X-Cost", rules.RefusalsCount)

	// Replacing them leaves them out again.
	mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", id), map[string]any{"scope": "endpoint",
		"match": map[string]any{"endpoint": "export"}, "limits": lim}, 200, nil)
	mustCall(t, base, "PUT", "/admin/v1/endpoints/export", map[string]any{"path": "/v1/export", "cost": 10}, 200, &put)
	check("replaced", gateway(put.Snapshot.Version, "export"), "", "")

	// Through PUT /admin/v1/ruleset, twice: the second is unchanged.
	doc := map[string]any{
		"endpoints": []any{map[string]any{"name": "export", "path": "/v1/export", "cost": 5, "cost_header": "X-Rows"}},
		"rules": []any{map[string]any{"scope": "endpoint", "match": map[string]any{"endpoint": "export"},
			"refusals": "count", "limits": lim}},
	}
	var applied struct {
		Snapshot *rulesvc.Published
		Changes  []any
	}
	mustCall(t, base, "PUT", "/admin/v1/ruleset", doc, 200, &applied)
	if applied.Snapshot == nil {
		t.Fatal("PUT ruleset made no version")
	}
	mustCall(t, base, "GET", "/admin/v1/endpoints/export", nil, 200, &ep)
	mustCall(t, base, "GET", fmt.Sprintf("/admin/v1/rules/%d", id), nil, 200, &view)
	if ep.CostHeader != "X-Rows" || view.Refusals != rules.RefusalsCount {
		t.Errorf("after PUT ruleset: endpoint %+v, rule refusals %q; want X-Rows and count", ep, view.Refusals)
	}
	check("ruleset", gateway(applied.Snapshot.Version, "export"), "X-Rows", rules.RefusalsCount)
	applied.Snapshot, applied.Changes = nil, nil
	mustCall(t, base, "PUT", "/admin/v1/ruleset", doc, 200, &applied)
	if applied.Snapshot != nil || len(applied.Changes) != 0 {
		t.Errorf("the same rule set again: snapshot %v, changes %v; want none", applied.Snapshot, applied.Changes)
	}

	// Bad values are refused, naming the field, and nothing is stored.
	bad := []struct {
		method, path string
		body         any
		field        string
	}{
		{"POST", "/admin/v1/rules", map[string]any{"scope": "default", "refusals": "sometimes", "limits": lim}, "refusals"},
		{"PUT", fmt.Sprintf("/admin/v1/rules/%d", id), map[string]any{"scope": "endpoint", "match": map[string]any{"endpoint": "export"},
			"refusals": "always", "limits": lim}, "refusals"},
		{"PUT", "/admin/v1/ruleset", map[string]any{"rules": []any{map[string]any{"scope": "default", "refusals": "sometimes", "limits": lim}}}, `"field":"rules[0].refusals"`},
		{"PUT", "/admin/v1/endpoints/export", map[string]any{"path": "/v1/export", "cost_header": "Content-Length"}, "cost_header"},
		{"PUT", "/admin/v1/endpoints/export", map[string]any{"path": "/v1/export", "cost_header": "X Cost"}, "cost_header"},
		{"PUT", "/admin/v1/ruleset", map[string]any{"rules": []any{}, "endpoints": []any{map[string]any{"name": "export", "path": "/v1/export", "cost_header": "Retry-After"}}}, "cost_header"},
	}
	for _, tt := range bad {
		code, raw := call(t, base, writeToken, tt.method, tt.path, tt.body, nil)
		if code/100 != 4 || !strings.Contains(raw, tt.field) {
			t.Errorf("%s %s: got %d %s, want 4xx naming %s", tt.method, tt.path, code, raw, tt.field)
		}
	}
	mustCall(t, base, "GET", "/admin/v1/endpoints/export", nil, 200, &ep)
	mustCall(t, base, "GET", fmt.Sprintf("/admin/v1/rules/%d", id), nil, 200, &view)
	if ep.CostHeader != "X-Rows" || view.Refusals != rules.RefusalsCount {
		t.Errorf("after refused changes: endpoint %+v, rule refusals %q; want X-Rows and count", ep, view.Refusals)
	}
	if raw := mustCall(t, base, "GET", "/admin/v1/rules", nil, 200, nil); strings.Contains(raw, `"scope":"default"`) {
		t.Errorf("a refused rule was stored: %s", raw)
	}
}
