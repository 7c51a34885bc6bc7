package rules_test

import (
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
	if !set.HasConcurrency() {
		t.Fatal("HasConcurrency false")
	}
	for _, tt := range []struct {
		key, endpoint string
		want          int64
	}{{"a", "", 10}, {"a", "export", 2}, {"b", "export", 10}, {"vip", "export", 50}, {"", "", 3}} {
		res := set.Resolve(time.Unix(1e9, 0), rules.Query{APIKey: tt.key, Endpoint: tt.endpoint})
		if res.Concurrency != tt.want || res.ConcurrencyRule == nil {
			t.Errorf("key %q endpoint %q: concurrency %d, want %d", tt.key, tt.endpoint, res.Concurrency, tt.want)
		}
	}
	for _, tt := range []struct{ name, doc, want string }{
		{"negative", "rules:\n  - scope: default\n    concurrency: -1", "negative"},
		{"shadow", "rules:\n  - scope: default\n    mode: shadow\n    concurrency: 3", "shadow rule"},
		{"org", "rules:\n  - scope: org\n    concurrency: 3", "org rule"},
		{"nothing", "rules:\n  - scope: default", "at least one limit, a quota or a concurrency"},
	} {
		if _, err := rules.Parse("bad.yaml", []byte(tt.doc)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}
