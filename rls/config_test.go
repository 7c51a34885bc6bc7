package rls_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/rls"
)

func TestParseRulesErrors(t *testing.T) {
	tests := []struct {
		name, config, want string
	}{
		{"empty", "", "empty file"},
		{"not a mapping", "- a\n", "want a mapping"},
		{"no domain", "descriptors: []\n", "no domain"},
		{"no key", "domain: d\ndescriptors: [{value: v}]\n", "test.yaml:2: descriptor has no key"},
		{"bad unit", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n", `unit "fortnight"`},
		{"no rate", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second}}]\n", "no requests_per_unit"},
		{"negative rate", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: -1}}]\n", "requests_per_unit"},
		{"twice", "domain: d\ndescriptors: [{key: k, value: v}, {key: k, value: v}]\n", "k=v is configured twice"},
		{"two any", "domain: d\ndescriptors: [{key: k}, {key: k}]\n", `key "k" and no value is configured twice`},
		{"bad algorithm", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}}]\n", `unknown algorithm "leaky"`},
		{"bad fail mode", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, fail_mode: maybe}}]\n", `fail_mode "maybe"`},
		{"unenforceable", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 20000, algorithm: sliding_log}}]\n", "sliding_log keeps one entry per token"},
		{"bad replaces", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}}]\n", "replaces entry"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n", `test.yaml:4: descriptor with key "k": share_threshold needs a value with a '*'`},
		{"share not bool", "domain: d\ndescriptors: [{key: k, value: v*, share_threshold: maybe}]\n", "share_threshold must be true or false"},
		{"two documents", "domain: d\n---\ndomain: e\n", "more than one YAML document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := rls.ParseRules("test.yaml", []byte(tt.config))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseRulesWarnsAndIgnores(t *testing.T) {
	_, warnings, err := rls.ParseRules("test.yaml", []byte(`
domain: d
colour: blue
descriptors:
  - key: k
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 5, burst: 9, colour: red}
  - key: u
    rate_limit: {unlimited: true, unit: second}
  - key: s
    value: exact
    share_threshold: true
`))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(warnings, "\n")
	for _, want := range []string{`test.yaml:3: ignoring unknown field "colour"`, "ignoring quota_mode", "sliding_window ignores burst",
		`ignoring unknown rate_limit field "colour"`, "unlimited is set",
		"test.yaml:12: descriptor s=exact: share_threshold has no effect"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings %q: want one containing %q", got, want)
		}
	}
}

func TestLoadRulesDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	write(t, filepath.Join(dir, "b.yml"), "domain: b\n")
	write(t, filepath.Join(dir, ".hidden.yaml"), "not: [valid")
	write(t, filepath.Join(dir, "notes.txt"), "ignored")
	r, _, err := rls.LoadRules(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Domains(), ","); got != "a,b" {
		t.Errorf("domains: got %s, want a,b", got)
	}
	write(t, filepath.Join(dir, "c.yaml"), "domain: a\n")
	if _, _, err := rls.LoadRules(dir); err == nil || !strings.Contains(err.Error(), `domain "a" is configured twice`) {
		t.Errorf("duplicate domain: got %v, want an error", err)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseRules(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors: [{key: k, value: v*, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: [{key: x}]}]\n"))
	f.Add([]byte("domain: d\ndescriptors: [{key: k, rate_limit: {unlimited: true, replaces: [{name: n}]}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, _, err := rls.ParseRules("fuzz.yaml", data)
		if err == nil && len(r.Domains()) != 1 {
			t.Errorf("parsed with %d domains, want 1", len(r.Domains()))
		}
	})
}
