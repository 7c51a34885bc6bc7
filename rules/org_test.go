package rules_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

const orgRules = `
keys:
  a1: {plan: pro, org: acme}
  a2: {plan: pro, org: acme}
  b1: {plan: pro, org: beta}
  solo: {plan: pro}
endpoints:
  - {name: search, path: /search}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 10, per: 1s}]
  - scope: org
    limits: [{name: s, rate: 100, per: 1s}]
  - scope: org
    match: {org: acme}
    limits: [{name: s, rate: 50, per: 1s}, {name: d, rate: 1000, per: 1d}]
  - scope: org
    match: {org: acme, endpoint: search}
    limits: [{name: s, rate: 20, per: 1s}]
  - scope: org
    match: {org: beta}
    mode: shadow
    limits: [{name: m, rate: 600, per: 1m}]
`

func TestResolveOrg(t *testing.T) {
	set, err := rules.Parse("org.yaml", []byte(orgRules))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	tests := []struct {
		key, endpoint string
		org           string
		limits        string // name:count, key's then org's
		orgLimits     int
		shadow        int
	}{
		{"a1", "", "acme", "s:10 s:50 d:1000", 2, 0},
		{"a2", "search", "acme", "s:10 s:20 d:1000", 2, 0},
		{"b1", "", "beta", "s:10 s:100", 1, 1},
		{"solo", "", "", "s:10", 0, 0},
		{"unknown", "", "", "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.key+"/"+tt.endpoint, func(t *testing.T) {
			res := set.Resolve(now, rules.Query{APIKey: tt.key, Endpoint: tt.endpoint})
			var got []string
			for _, l := range res.Limits {
				got = append(got, l.Name+":"+strconv.FormatInt(l.Count, 10))
			}
			if g := strings.Join(got, " "); g != tt.limits || res.Org != tt.org || res.OrgLimits != tt.orgLimits || res.OrgShadow != tt.shadow {
				t.Errorf("got %q org %q (%d, shadow %d), want %q org %q (%d, shadow %d)",
					g, res.Org, res.OrgLimits, res.OrgShadow, tt.limits, tt.org, tt.orgLimits, tt.shadow)
			}
		})
	}
}

func TestStoreLimitsOrg(t *testing.T) {
	set, err := rules.Parse("org.yaml", []byte(orgRules))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	r1 := set.Resolve(now, rules.Query{APIKey: "a1"})
	r2 := set.Resolve(now, rules.Query{APIKey: "a2"})
	if k1, k2 := r1.StoreKey("k:a1"), r2.StoreKey("k:a2"); k1 != "o:acme" || k2 != k1 {
		t.Fatalf("store keys %q, %q; want both o:acme", k1, k2)
	}
	l1, l2 := r1.AppendStoreLimits(nil, "a1"), r2.AppendStoreLimits(nil, "a2")
	if len(l1) != 3 || len(l2) != 3 {
		t.Fatalf("got %d and %d store limits, want 3", len(l1), len(l2))
	}
	if l1[0].Name == l2[0].Name || !strings.HasPrefix(l1[0].Name, "s~k") {
		t.Errorf("key limits %q and %q: want distinct names starting s~k", l1[0].Name, l2[0].Name)
	}
	for i := 1; i < 3; i++ {
		if l1[i].Name != l2[i].Name || !strings.HasSuffix(l1[i].Name, "~org") {
			t.Errorf("org limit %d: %q and %q, want one shared NAME~org", i, l1[i].Name, l2[i].Name)
		}
	}
	for _, l := range l1 {
		if err := l.Validate(); err != nil {
			t.Errorf("store limit %q: %v", l.Name, err)
		}
	}
	solo := set.Resolve(now, rules.Query{APIKey: "solo"})
	if got := solo.StoreKey("k:solo"); got != "k:solo" {
		t.Errorf("key without org: store key %q, want k:solo", got)
	}
	long := rules.Resolution{Org: "acme", Limits: append(r1.Limits[:0:0], r1.Limits...), OrgLimits: 2}
	long.Limits[0].Name = strings.Repeat("n", 64)
	if l := long.AppendStoreLimits(nil, "a1")[0]; len(l.Name) > 64 || l.Validate() != nil {
		t.Errorf("long name became %q (%d bytes): %v", l.Name, len(l.Name), l.Validate())
	}
}

func TestOrgRuleErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"org with plan", "rules:\n  - scope: org\n    match: {org: a, plan: p}\n    limits: [{name: s, rate: 1, per: 1s}]", "an org rule matches"},
		{"org on plan rule", "rules:\n  - scope: plan\n    match: {plan: p, org: a}\n    limits: [{name: s, rate: 1, per: 1s}]", "a plan rule matches"},
		{"org name with control", "rules:\n  - scope: org\n    match: {org: \"a\\tb\"}\n    limits: [{name: s, rate: 1, per: 1s}]", "match.org"},
		{"key org with control", "keys:\n  k: {plan: p, org: \"a\\nb\"}\nrules:\n  - scope: org\n    limits: [{name: s, rate: 1, per: 1s}]", "keys[\"k\"]: org"},
		{"two every-org rules", "rules:\n  - scope: org\n    limits: [{name: s, rate: 1, per: 1s}]\n  - scope: org\n    limits: [{name: m, rate: 1, per: 1m}]", "already exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse("bad.yaml", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
