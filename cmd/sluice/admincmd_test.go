package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
)

const (
	cliWriteToken = "cli-write-token-0123456789"
	cliReadToken  = "cli-read-token-0123456789"
)

// startRulesService runs sluice rules over a fresh schema of the test
// database, with a write and a read token from the environment, and
// returns its URL.
func startRulesService(t *testing.T) string {
	t.Helper()
	schema := pgtest.Schema(t, "sluice_cli_")
	p := sluice.StartEnv(t, []string{"SLUICE_WRITE_TOKEN=" + cliWriteToken, "SLUICE_READ_TOKEN=" + cliReadToken},
		"rules", "--postgres", pgtest.DSN(), "--schema", schema, "--listen", "127.0.0.1:0", "--trusted-network", "--no-canary")
	return p.URL
}

// cliStep is one command line against the rules service and what it must
// give: the exit code, and patterns stdout (or, for a failure, stderr)
// must match.
type cliStep struct {
	args     []string
	env      []string
	wantCode int
	want     []string
}

func runSteps(t *testing.T, steps []cliStep) {
	t.Helper()
	for _, s := range steps {
		code, stdout, stderr := runEnv(t, s.env, s.args...)
		out := stdout
		if s.wantCode != 0 {
			out = stderr
		}
		if code != s.wantCode {
			t.Fatalf("sluice %s: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(s.args, " "), code, s.wantCode, stdout, stderr)
		}
		for _, w := range s.want {
			if !regexp.MustCompile(w).MatchString(out) {
				t.Errorf("sluice %s: output does not match %q:\nstdout:\n%s\nstderr:\n%s", strings.Join(s.args, " "), w, stdout, stderr)
			}
		}
		if s.wantCode == 0 && strings.TrimSpace(stderr) != "" {
			t.Errorf("sluice %s: printed on stderr:\n%s", strings.Join(s.args, " "), stderr)
		}
	}
}

func TestRulesApply(t *testing.T) {
	t.Parallel()
	url := startRulesService(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(cliWriteToken+"\n"), 0o600)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := write("first.yaml", `
keys:
  key_pro: {plan: pro}
endpoints:
  - {name: search, path: /v1/search, cost: 2}
rules:
  - scope: default
    limits: [{name: s, rate: 10, per: 1s}]
  - scope: plan
    match: {plan: pro, endpoint: search}
    limits: [{name: q, rate: 5, per: 1s}]
`)
	second := write("second.yaml", `
endpoints: []
rules:
  - scope: default
    limits: [{name: s, rate: 20, per: 1s}]
`)
	broken := write("broken.yaml", `
rules:
  - scope: plan
    match: {plan: pro, endpoint: nowhere}
    limits: [{name: s, rate: 1, per: 1s}]
`)
	withToken := []string{"SLUICE_ADMIN_TOKEN=" + cliWriteToken}
	apply := func(extra ...string) []string {
		return append([]string{"rules", "apply", "--rules-url", url}, extra...)
	}
	runSteps(t, []cliStep{
		{apply("-f", first, "--dry-run"), withToken, 0, []string{`(?m)^\+ rule default$`, `(?m)^\+ rule plan plan=pro endpoint=search$`,
			`(?m)^\+ key key_pro$`, `(?m)^\+ endpoint search$`, `4 changes; dry run: nothing stored`}},
		// The token from a file; the dry run stored nothing, so the same
		// four changes, now in one version.
		{apply("-f", first, "--token-file", tokenFile), nil, 0, []string{`(?m)^\+ rule \d+: default$`, `4 changes in version \d+ \(promoted\)`}},
		{apply("-f", first), withToken, 0, []string{`no changes: the rule set already matches`}},
		{apply("-f", second), withToken, 0, []string{`(?m)^~ rule \d+: default\n    - .*"rate":10.*\n    \+ .*"rate":20`,
			`(?m)^- rule \d+: plan plan=pro endpoint=search$`, `(?m)^- endpoint search$`, `3 changes in version \d+`}},
		{apply("-f", broken), withToken, 1, []string{`sluice rules: apply .*broken.yaml: rules service: 422 .*nowhere`}},
		// The rules and the URL from the environment.
		{[]string{"rules", "apply", "-f", second}, append([]string{"SLUICE_RULES_URL=" + url}, withToken...), 0, []string{`no changes`}},
		{apply("-f", second), []string{"SLUICE_ADMIN_TOKEN=" + cliReadToken}, 1, []string{`403 Forbidden: Authorization: token env-read has role read; this needs write`}},
		{apply("-f", second), []string{"SLUICE_ADMIN_TOKEN="}, 1, []string{`no token: give --token-file, or set \$SLUICE_ADMIN_TOKEN`}},
		{apply("-f", second), []string{"SLUICE_ADMIN_TOKEN=short"}, 1, []string{`the token is 5 bytes; the rules service's tokens are at least 16`}},
		{apply(), withToken, 2, []string{`-f is required`, `usage: sluice rules apply`}},
		{apply("-f", second, "extra"), withToken, 2, []string{`unexpected argument "extra"`}},
		{apply("-f", filepath.Join(dir, "missing.yaml")), withToken, 1, []string{`read rules file: open .*missing.yaml`}},
		{apply("-f", write("norules.yaml", "keys: {}\n")), withToken, 1, []string{`has no rules section`}},
		{apply("-f", write("typo.yaml", "rulez: []\n")), withToken, 1, []string{`field rulez not found`}},
	})
}

func TestOverrideAndRolloutCommands(t *testing.T) {
	t.Parallel()
	url := startRulesService(t)
	env := []string{"SLUICE_ADMIN_TOKEN=" + cliWriteToken, "SLUICE_RULES_URL=" + url}
	read := []string{"SLUICE_ADMIN_TOKEN=" + cliReadToken, "SLUICE_RULES_URL=" + url}
	until := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	runSteps(t, []cliStep{
		{[]string{"override", "list"}, read, 0, []string{`^no overrides\n$`}},
		{[]string{"override", "set", "key_noisy", "--rate", "5", "--per", "1s", "--for", "2h", "--reason", "incident 41"}, env, 0,
			[]string{`override of key_noisy set until \S+: rule \d+ in version \d+ \(promoted\)`}},
		// The key after the flags, and --until.
		{[]string{"override", "set", "--rate", "0.5", "--per", "1m", "--until", until, "--reason", "scraper", "key_scraper"}, env, 0,
			[]string{`override of key_scraper set until ` + until}},
		{[]string{"override", "list"}, read, 0, []string{`(?m)^KEY\s+RULE\s+LIMITS\s+EXPIRES\s+REASON$`,
			`(?m)^key_noisy\s+\d+\s+override 5/1s\s+\S+\s+incident 41$`, `(?m)^key_scraper\s+\d+\s+override 0.5/1m\s+` + until + `\s+scraper$`}},
		{[]string{"override", "end", "key_noisy"}, env, 0, []string{`override of key_noisy ended in version \d+`}},
		{[]string{"override", "end", "key_noisy"}, env, 1, []string{`404 Not Found: no override of key "key_noisy"`}},
		{[]string{"override", "set", "key_x", "--rate", "5", "--per", "1s", "--for", "30d", "--reason", "r"}, env, 1,
			[]string{`400 Bad Request: expires_at: .* beyond the longest override`}},
		{[]string{"override", "set", "key_x", "--rate", "5", "--per", "1s", "--for", "1h"}, env, 2, []string{`--reason is required`}},
		{[]string{"override", "set", "key_x", "--rate", "five", "--per", "1s", "--for", "1h", "--reason", "r"}, env, 2, []string{`--rate "five": want a number`}},
		{[]string{"override", "set", "key_x", "--rate", "5", "--per", "1s", "--for", "1h", "--until", until, "--reason", "r"}, env, 2, []string{`give one of --for and --until`}},
		{[]string{"override", "set", "--rate", "5"}, env, 2, []string{`want KEY`, `usage: sluice override set`}},
		{[]string{"override", "end"}, env, 2, []string{`want KEY`}},
		{[]string{"override", "end", "a", "b"}, env, 2, []string{`unexpected argument "b"`}},
		{[]string{"override", "frobnicate"}, env, 2, []string{`unexpected argument "frobnicate": want a verb: set, list, end`}},
		{[]string{"override"}, env, 2, []string{`want a verb`}},

		{[]string{"rollout", "status"}, read, 0, []string{`(?m)^stable version \d+$`, `(?m)^VERSION\s+STATE\s+STARTED\s+DECIDED\s+REASON$`,
			`(?m)^\d+\s+promoted \(emergency\)\s+`}},
		{[]string{"rollout", "promote", "--reason", "looks fine"}, env, 1, []string{`409 Conflict: no canary is running`}},
		{[]string{"rollout", "halt", "--reason", "x"}, read, 1, []string{`403 Forbidden`}},
		{[]string{"rollout", "halt"}, env, 2, []string{`--reason is required`}},
		{[]string{"rollout", "status", "--rules-url", "ftp://x"}, env, 1, []string{`--rules-url "ftp://x": want an http:// or https:// URL`}},
	})
}

// A canary started by rules apply is halted by rollout halt and the
// status shows both.
func TestRolloutHaltOfAnAppliedCanary(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t, "sluice_cli_")
	p := sluice.StartEnv(t, []string{"SLUICE_WRITE_TOKEN=" + cliWriteToken},
		"rules", "--postgres", pgtest.DSN(), "--schema", schema, "--listen", "127.0.0.1:0", "--trusted-network", "--canary-window", "1h")
	env := []string{"SLUICE_ADMIN_TOKEN=" + cliWriteToken, "SLUICE_RULES_URL=" + p.URL}
	dir := t.TempDir()
	file := func(rate string) string {
		path := filepath.Join(dir, rate+".yaml")
		os.WriteFile(path, []byte("rules:\n  - scope: default\n    limits: [{name: s, rate: "+rate+", per: 1s}]\n"), 0o644)
		return path
	}
	runSteps(t, []cliStep{
		// The first rules are promoted at once; the next go to a canary.
		{[]string{"rules", "apply", "-f", file("10")}, env, 0, []string{`\(promoted\)`}},
		{[]string{"rules", "apply", "-f", file("20")}, env, 0, []string{`in version \d+ \(canary: see sluice rollout status\)`}},
		{[]string{"rollout", "status"}, env, 0, []string{`(?m)^canary version \d+ on  since `, `(?m)^  canary 0 gateways`, `(?m)^\d+\s+canary\s+`}},
		{[]string{"rollout", "halt", "--reason", "refusals up"}, env, 0, []string{`^version \d+ halted\n$`}},
		{[]string{"rollout", "status"}, env, 0, []string{`(?m)^\d+\s+halted\s+\S+\s+\S+\s+halted by env-write: refusals up$`}},
	})
}
