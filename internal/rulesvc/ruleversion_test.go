package rulesvc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
)

// TestOverrideVersionDuringCanary sets an override while a canary runs:
// the emergency snapshot the fleet runs, the canary snapshot published
// beside it and the admin API all name the override by one version, the
// emergency snapshot's.
func TestOverrideVersionDuringCanary(t *testing.T) {
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Window: time.Hour}})
	base := r.srv.URL
	seed(t, base)
	var cs []*rulesync.Client
	for i := range 3 {
		cs = append(cs, startClient(t, base, fmt.Sprintf("gw-%d", i), "eu", rulesync.Config{}))
	}
	waitVersion(t, stableVersion(t, base), cs...)
	waitFleet(t, base, len(cs))
	var res struct {
		Snapshot rulesvc.Published
		After    rulesvc.RuleView
	}
	mustCall(t, base, "PUT", "/admin/v1/overrides/key_pro", map[string]any{
		"limits":     []map[string]any{{"name": "s", "rate": 1, "per": "1m"}},
		"expires_at": time.Now().Add(time.Hour).Format(time.RFC3339), "reason": "INC-7"}, 200, &res)
	if res.Snapshot.Emergency == 0 || res.Snapshot.Rollout != "canary" {
		t.Fatalf("got %+v, want an emergency snapshot beside a canary", res.Snapshot)
	}
	if res.After.Version != res.Snapshot.Emergency {
		t.Errorf("admin API: override version %d, want the emergency snapshot's %d", res.After.Version, res.Snapshot.Emergency)
	}
	waitVersion(t, res.Snapshot.Emergency, cs...)
	seen := map[int64]bool{}
	for i, c := range cs {
		set := c.Current()
		for _, ru := range set.Document().Rules {
			if ru.ID != res.After.ID {
				continue
			}
			seen[set.Version] = true
			if ru.Version != res.Snapshot.Emergency {
				t.Errorf("gateway %d on snapshot %d: override %d has version %d, want %d", i, set.Version, ru.ID, ru.Version, res.Snapshot.Emergency)
			}
		}
	}
	if len(seen) == 0 {
		t.Error("no gateway's snapshot holds the override")
	}
}

// TestValidateHashIsTheSnapshots validates a change of a rule and then
// makes it: the hash validate answered is the published snapshot's, as
// admin.Validation promises, though publishing stamps the rule's version.
func TestValidateHashIsTheSnapshots(t *testing.T) {
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	var created struct{ After rulesvc.RuleView }
	mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "default",
		"limits": []map[string]any{{"name": "s", "rate": 10, "per": "1s"}}}, 201, &created)
	rule := map[string]any{"id": created.After.ID, "scope": "default", "limits": []map[string]any{{"name": "s", "rate": 11, "per": "1s"}}}
	var v struct{ Hash string }
	mustCall(t, base, "POST", "/admin/v1/rules/validate", rule, 200, &v)
	delete(rule, "id")
	var ch struct{ Snapshot rulesvc.Published }
	mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", created.After.ID), rule, 200, &ch)
	c := startClient(t, base, "gw", "eu", rulesync.Config{})
	waitVersion(t, ch.Snapshot.Version, c)
	if got := c.Current().Hash; got != v.Hash {
		t.Errorf("validate answered hash %s; snapshot %d has %s", v.Hash, ch.Snapshot.Version, got)
	}
}
