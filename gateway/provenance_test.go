package gateway_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/rules"
)

// TestRefusalNamesTheRule checks that a 429 names the rule that refused,
// as the rules service's snapshot gives it (scope, plan or override, rule
// ID and rules version), lists every enforced limit of the request, and
// that the decision log names the same rule.
func TestRefusalNamesTheRule(t *testing.T) {
	clock := limittest.NewClock(start)
	expires := start.Add(time.Hour)
	doc := rules.Document{
		Keys:      map[string]rules.KeyInfo{"key_pro": {Plan: "pro"}, "key_ov": {Plan: "pro"}},
		Endpoints: []rules.Endpoint{{Name: "search", Path: "/v1/search"}},
		Rules: []rules.Rule{
			{ID: 3, Version: 10, Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"},
				Limits: []rules.Limit{{Name: "minute", Rate: 100, Per: rules.Duration(time.Minute)}, {Name: "second", Rate: 2, Per: rules.Duration(time.Second)}}},
			{ID: 9, Version: 12, Scope: rules.ScopeKey, Match: rules.Match{Key: "key_ov"}, ExpiresAt: expires, Reason: "INC-23 retry storm",
				Limits: []rules.Limit{{Name: "second", Rate: 1, Per: rules.Duration(time.Second)}}},
		},
	}
	set, err := rules.Compile(doc, 12)
	if err != nil {
		t.Fatal(err)
	}
	var log proctest.Buffer
	lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set), Now: clock.Now, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()

	tests := []struct {
		key        string
		passes     int
		wantRule   gateway.ProblemRule
		wantDetail string
	}{
		{"key_pro", 2, gateway.ProblemRule{Scope: rules.ScopePlan, Plan: "pro", ID: 3, Version: 10, RulesVersion: 12},
			"plan pro's rule (rule 3, version 10, of rules version 12)"},
		{"key_ov", 1, gateway.ProblemRule{Scope: rules.ScopeKey, Override: true, ExpiresAt: expires, ID: 9, Version: 12, RulesVersion: 12},
			"the emergency override of your key (rule 9, version 12, of rules version 12)"},
	}
	for _, tt := range tests {
		for range tt.passes {
			if resp, body := doURL(t, "GET", srv.URL+"/v1/search", "X-API-Key", tt.key); resp.StatusCode != 200 {
				t.Fatalf("%s: got %d %s, want 200", tt.key, resp.StatusCode, body)
			}
		}
		resp, body := doURL(t, "GET", srv.URL+"/v1/search", "X-API-Key", tt.key)
		if resp.StatusCode != 429 {
			t.Fatalf("%s: got %d, want 429", tt.key, resp.StatusCode)
		}
		p := decodeProblem(t, resp, body)
		if p.Rule == nil || !p.Rule.ExpiresAt.Equal(tt.wantRule.ExpiresAt) {
			t.Fatalf("%s: got rule %+v, want %+v", tt.key, p.Rule, tt.wantRule)
		}
		got := *p.Rule
		got.ExpiresAt = tt.wantRule.ExpiresAt
		if got != tt.wantRule || !strings.Contains(p.Detail, tt.wantDetail) {
			t.Errorf("%s: got rule %+v detail %q, want %+v and %q", tt.key, got, p.Detail, tt.wantRule, tt.wantDetail)
		}
		if strings.Contains(body, "INC-23") {
			t.Errorf("%s: the body shows the override's reason, an operator's note: %s", tt.key, body)
		}
		if len(p.Limits) != 2 || p.Limits[0].Name != "minute" || p.Limits[1].Name != "second" || !p.Limits[1].Refused || p.Limits[0].Refused {
			t.Fatalf("%s: got limits %+v, want minute then second, second refusing", tt.key, p.Limits)
		}
		// Each limit names its own rule and that rule's version: the
		// override's second beside the plan's minute.
		if m, s := p.Limits[0].Rule, p.Limits[1].Rule; m.ID != 3 || m.Version != 10 || s.ID != tt.wantRule.ID || s.Version != tt.wantRule.Version {
			t.Errorf("%s: limits' rules %+v and %+v, want rule 3 version 10 and rule %d version %d", tt.key, m, s, tt.wantRule.ID, tt.wantRule.Version)
		}
		// Each limit's own answer: the minute had room, the second none.
		if m, s := p.Limits[0], p.Limits[1]; m.Remaining == nil || *m.Remaining != 100-int64(tt.passes) || m.RetryAfterMillis != 0 ||
			s.Remaining == nil || *s.Remaining != 0 || s.RetryAfterMillis <= 0 {
			t.Errorf("%s: got minute %+v second %+v, want the minute with %d left, the second with none and a wait",
				tt.key, m, s, 100-tt.passes)
		}
	}
	// The decision log names the override with its reason.
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var rec struct {
			Outcome string         `json:"outcome"`
			Rule    map[string]any `json:"rule"`
			Limits  []string       `json:"limits"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Outcome == "refused" && rec.Rule["id"] == 9.0 {
			found = rec.Rule["override"] == true && rec.Rule["reason"] == "INC-23 retry storm" && rec.Rule["version"] == 12.0 && len(rec.Limits) == 2
		}
	}
	if !found {
		t.Errorf("decision log lacks the override's refusal with its reason, its version and both limits:\n%s", log.String())
	}
}
