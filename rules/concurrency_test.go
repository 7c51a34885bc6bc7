package rules_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

func TestResolveConcurrency(t *testing.T) {
	set, err := rules.Parse("conc.yaml", []byte(`
keys:
  a: {plan: pro}
  b: {plan: free}
  vip: {plan: pro}
endpoints:
  - {name: export, path: /export}
rules:
  - scope: default
    concurrency: 10
  - scope: plan
    match: {plan: pro, endpoint: export}
    concurrency: 2
  - scope: key
    match: {key: vip}
    concurrency: 50
  - scope: ip
    concurrency: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key, endpoint string
		want          int64
	}{{"a", "", 10}, {"a", "export", 2}, {"b", "export", 10}, {"vip", "export", 50}, {"", "", 3}} {
		res := set.Resolve(time.Unix(1e9, 0), rules.Query{APIKey: tt.key, Endpoint: tt.endpoint})
		if len(res.Concurrency) != 1 || res.Concurrency[0].Most != tt.want || res.Concurrency[0].Rule == nil {
			t.Errorf("key %q endpoint %q: concurrency %+v, want one of %d", tt.key, tt.endpoint, res.Concurrency, tt.want)
		}
	}
	for _, tt := range []struct{ name, doc, want string }{
		{"negative", "rules:\n  - scope: default\n    concurrency: -1", "negative"},
		{"nothing", "rules:\n  - scope: default", "at least one limit, a quota or a concurrency"},
	} {
		if _, err := rules.Parse("bad.yaml", []byte(tt.doc)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// TestResolveConcurrencyKinds resolves the four kinds of concurrency limit
// a request can have, in their order: the key's, the org's (held under
// the org's store key), and the shadow ones of each.
func TestResolveConcurrencyKinds(t *testing.T) {
	set, err := rules.Parse("conc.yaml", []byte(`
keys:
  a: {plan: pro, org: acme}
  b: {plan: pro}
rules:
  - scope: plan
    match: {plan: pro}
    concurrency: 10
  - scope: plan
    match: {plan: pro}
    mode: shadow
    concurrency: 5
  - scope: org
    concurrency: 40
  - scope: org
    match: {org: acme}
    concurrency: 30
  - scope: org
    match: {org: acme}
    mode: shadow
    concurrency: 20
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ key, want string }{
		{"a", "10 o:acme/30 shadow:5 shadow:o:acme/20"},
		{"b", "10 shadow:5"},
	} {
		res := set.Resolve(time.Unix(1e9, 0), rules.Query{APIKey: tt.key})
		var got []string
		for _, c := range res.Concurrency {
			s := kindLabel(c.Key, c.Shadow, strconv.FormatInt(c.Most, 10))
			if c.Rule == nil || c.Rule.Concurrency != c.Most {
				t.Errorf("key %s: limit %s has rule %+v", tt.key, s, c.Rule)
			}
			got = append(got, s)
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("key %s: got %q, want %q", tt.key, g, tt.want)
		}
	}
}

// kindLabel writes what of a kind of limit the tests compare: "shadow:"
// for a shadow one, its store key when not the caller's, and s.
func kindLabel(key string, shadow bool, s string) string {
	if key != "" {
		s = key + "/" + s
	}
	if shadow {
		s = "shadow:" + s
	}
	return s
}
