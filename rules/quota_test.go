package rules_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

func TestResolveQuotas(t *testing.T) {
	set, err := rules.Parse("quotas.yaml", []byte(`
keys:
  a: {plan: pro}
  b: {plan: free}
rules:
  - scope: default
    quotas: [{name: daily, count: 1000, per: day}]
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 10, per: 1s}]
    quotas:
      - {name: daily, count: 10000, per: day, zone: Europe/Berlin}
      - {name: monthly, count: 200000, per: month}
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	for _, tt := range []struct {
		key  string
		want string
	}{
		{"a", "daily:10000:day:Europe/Berlin monthly:200000:month:UTC"},
		{"b", "daily:1000:day:UTC"},
	} {
		res := set.Resolve(now, rules.Query{APIKey: tt.key})
		var got []string
		for _, q := range res.Quotas {
			zone := "UTC"
			if q.Location != nil {
				zone = q.Location.String()
			}
			got = append(got, q.Name+":"+strconv.FormatInt(q.Count, 10)+":"+string(q.Period)+":"+zone)
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("key %s: got quotas %q, want %q", tt.key, g, tt.want)
		}
	}
}

func TestQuotaErrors(t *testing.T) {
	for _, tt := range []struct{ name, doc, want string }{
		{"bad zone", "rules:\n  - scope: default\n    quotas: [{name: d, count: 1, per: day, zone: Mars/Base}]", "quotas[0]: zone \"Mars/Base\""},
		{"bad period", "rules:\n  - scope: default\n    quotas: [{name: d, count: 1, per: week}]", "not day or month"},
		{"zero count", "rules:\n  - scope: default\n    quotas: [{name: d, count: 0, per: day}]", "must be positive"},
		{"on ip", "rules:\n  - scope: ip\n    quotas: [{name: d, count: 1, per: day}]", "ip rules have none"},
		{"twice", "rules:\n  - scope: default\n    quotas: [{name: d, count: 1, per: day}, {name: d, count: 2, per: month}]", "used twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse("bad.yaml", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestResolveQuotaKinds resolves key, org and shadow quotas: the org's
// count under the org's store key, the shadow ones last and marked.
func TestResolveQuotaKinds(t *testing.T) {
	set, err := rules.Parse("quotas.yaml", []byte(`
keys:
  a: {plan: pro, org: acme}
  b: {plan: pro}
rules:
  - scope: plan
    match: {plan: pro}
    quotas: [{name: daily, count: 1000, per: day}]
  - scope: plan
    match: {plan: pro}
    mode: shadow
    quotas: [{name: daily, count: 500, per: day}]
  - scope: org
    quotas: [{name: daily, count: 9000, per: day}]
  - scope: org
    match: {org: acme}
    quotas: [{name: daily, count: 5000, per: day}, {name: monthly, count: 90000, per: month}]
  - scope: org
    match: {org: acme}
    mode: shadow
    quotas: [{name: monthly, count: 60000, per: month}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ key, want string }{
		{"a", "daily:1000 o:acme/daily:5000 o:acme/monthly:90000 shadow:daily:500 shadow:o:acme/monthly:60000"},
		{"b", "daily:1000 shadow:daily:500"},
	} {
		res := set.Resolve(time.Unix(1e9, 0), rules.Query{APIKey: tt.key})
		var got []string
		for i, q := range res.Quotas {
			s := kindLabel(q.Key, q.Shadow, q.Name+":"+strconv.FormatInt(q.Count, 10))
			if r := res.QuotaRules[i]; (r.Mode == rules.Shadow) != q.Shadow {
				t.Errorf("key %s: quota %s from rule %+v", tt.key, s, r)
			}
			got = append(got, s)
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("key %s: got %q, want %q", tt.key, g, tt.want)
		}
	}
}
