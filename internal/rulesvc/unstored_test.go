package rulesvc_test

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/rulesvc"
)

// TestUnstoredFieldsRefused checks that the service refuses, with an error
// naming the field, what it cannot store yet, rather than storing the rest
// and losing it.
func TestUnstoredFieldsRefused(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{})
	base := r.srv.URL
	lim := []map[string]any{{"name": "s", "rate": 1, "per": "1s"}}
	tests := []struct {
		method, path string
		body         any
		field        string
	}{
		{"POST", "/admin/v1/rules", map[string]any{"scope": "default", "refusals": "count", "limits": lim}, `"field":"refusals"`},
		{"PUT", "/admin/v1/ruleset", map[string]any{"rules": []any{map[string]any{"scope": "default", "refusals": "count", "limits": lim}}}, `"field":"rules[0].refusals"`},
		{"PUT", "/admin/v1/endpoints/export", map[string]any{"path": "/v1/export", "cost_header": "X-Cost"}, `"field":"cost_header"`},
	}
	for _, tt := range tests {
		code, raw := call(t, base, writeToken, tt.method, tt.path, tt.body, nil)
		if code != 400 || !strings.Contains(raw, tt.field) || !strings.Contains(raw, "rules file") {
			t.Errorf("%s %s: got %d %s, want 400 naming %s and pointing to a rules file", tt.method, tt.path, code, raw, tt.field)
		}
	}
	if raw := mustCall(t, base, "GET", "/admin/v1/rules", nil, 200, nil); strings.Contains(raw, `"scope":"default"`) {
		t.Errorf("a refused rule was stored: %s", raw)
	}
}
