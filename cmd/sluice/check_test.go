package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", "rules:\n  - scope: default\n    limits: [{name: s, rate: 10, per: 1s}]\n")
	expired := write("expired.yaml", "rules:\n  - scope: default\n    limits: [{name: s, rate: 10, per: 1s}]\n"+
		"  - scope: key\n    match: {key: k1}\n    limits: [{name: s, rate: 1, per: 1s}]\n    expires_at: 2020-01-01T00:00:00Z\n    reason: old\n")
	badRate := write("bad-rate.yaml", "rules:\n  - scope: default\n    limits: [{name: s, rate: 10, per: 1s}]\n"+
		"  - scope: plan\n    match: {plan: pro}\n    limits: [{name: s, rate: -3, per: 1s}]\n")
	notYAML := write("broken.yaml", "rules: [\n")
	envoy := write("envoy.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	badEnvoy := write("bad-envoy.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	envoyDir := filepath.Join(dir, "envoy.d")
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(envoyDir, "api.yaml"), []byte("domain: api\ndescriptors: [{key: k}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string // in stdout
		wantErr    string // in stderr
		notWantErr string
	}{
		{"valid rules", []string{good}, 0, "good.yaml: valid rules: 1 rules (0 expired)", "", "warning"},
		{"expired rule warned", []string{expired}, 0, "valid rules: 2 rules (1 expired)",
			"warning: " + expired + ": rules[1] (key): expires_at 2020-01-01T00:00:00Z has passed", ""},
		{"bad field named", []string{badRate}, 1, "", "sluice check: " + badRate + ": invalid rules: ", ""},
		{"bad field names rule and field", []string{badRate}, 1, "", "rules[1]", ""},
		{"not YAML", []string{notYAML}, 1, "", "broken.yaml: invalid rules:", ""},
		{"missing file", []string{filepath.Join(dir, "nope.yaml")}, 1, "", "nope.yaml: no such file", ""},
		{"envoy detected", []string{envoy}, 0, "envoy.yaml: valid Envoy rate limit configuration, domains [api]", "", ""},
		{"envoy directory", []string{envoyDir}, 0, "valid Envoy rate limit configuration", "", ""},
		{"bad envoy names file and line", []string{badEnvoy}, 1, "", `bad-envoy.yaml: invalid Envoy rate limit configuration: ` + badEnvoy + `:4`, ""},
		{"envoy read as rules by flag", []string{"--format", "rules", envoy}, 1, "", "invalid rules", ""},
		{"rules read as envoy by flag", []string{"--format", "envoy", good}, 1, "", "invalid Envoy", ""},
		{"no file", nil, 2, "", "want one FILE", ""},
		{"two files", []string{good, good}, 2, "", "unexpected argument", ""},
		{"bad format", []string{"--format", "json", good}, 2, "", `--format "json": want auto, rules or envoy`, ""},
		{"unknown flag", []string{"--strict", good}, 2, "", "flag provided but not defined: -strict", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"check"}, tt.args...), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) || !strings.Contains(stderr.String(), tt.wantErr) ||
				(tt.notWantErr != "" && strings.Contains(stderr.String(), tt.notWantErr)) {
				t.Errorf("sluice check %v: got exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					tt.args, code, stdout.String(), stderr.String(), tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
}
