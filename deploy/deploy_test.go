// The tests of deploy/ check what an operator installs with the tools that
// will read it: promtool for the alerts and the Prometheus configuration,
// systemd-analyze for the units, redis-server for the Redis configuration,
// and a running gateway and rules service for every metric the alerts and
// the dashboard name. scripts/test installs the tools; a missing tool fails
// a test, never skips it.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// sluice is the binary the tests run, built on first use.
var sluice proctest.Binary

func TestMain(m *testing.M) { os.Exit(sluice.RunTests(m)) }

// tool returns the path of an installed program, failing the test with
// how to install it when it is missing.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed: scripts/test installs it (Debian package %s): %v", name, pkg, err)
	}
	return p
}

// run runs a command and fails the test, with its output, unless it exits
// 0. It returns the combined output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", "prometheus")
	run(t, promtool, "check", "rules", "prometheus/alerts.yml")
	out := run(t, promtool, "test", "rules", "prometheus/alerts_test.yml", "prometheus/alerts_week_test.yml")
	if strings.Count(out, "SUCCESS") != 2 {
		t.Errorf("promtool test rules: want two SUCCESS lines:\n%s", out)
	}
	run(t, promtool, "check", "config", "example/prometheus.yml")
}

// TestEveryAlertIsTested checks that each alert of alerts.yml is expected to
// fire somewhere in the promtool tests: an alert nobody tests could carry a
// typo in a metric name and never fire.
func TestEveryAlertIsTested(t *testing.T) {
	t.Parallel()
	tests := readFile(t, "prometheus/alerts_test.yml") + readFile(t, "prometheus/alerts_week_test.yml")
	for _, a := range alertNames(t) {
		// A test that expects the alert to fire lists it with exp_labels.
		re := regexp.MustCompile(`alertname: ` + a + `\n\s+exp_alerts:\n\s+- exp_labels`)
		if !re.MatchString(tests) {
			t.Errorf("alert %s: no promtool test expects it to fire", a)
		}
		if !strings.Contains(tests, "alertname: "+a+"\n        exp_alerts: []") {
			t.Errorf("alert %s: no promtool test expects it to stay quiet", a)
		}
	}
}

func alertNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)$`).FindAllStringSubmatch(readFile(t, "prometheus/alerts.yml"), -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("alerts.yml: found %d alerts, want at least 10", len(names))
	}
	return names
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(readFile(t, "grafana/sluice.json")))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana/sluice.json: %v", err)
	}
	return d
}

// dashboardExprs returns every PromQL expression of the dashboard's panels.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	for _, p := range readDashboard(t).Panels {
		for i, tg := range p.Targets {
			exprs[p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	return exprs
}

// TestDashboard checks that the dashboard has the panels the design asks
// for and that every query is PromQL Prometheus accepts, once Grafana has
// filled in its variables.
func TestDashboard(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard needs a title and a uid: %q, %q", d.Title, d.UID)
	}
	var titles []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		titles = append(titles, p.Title)
	}
	for _, want := range []string{"Decisions by outcome", "Decisions by source", "Added latency", "Redis calls per request",
		"Breaker state per node", "Rules version per gateway", "rls answers by code and source", "rls answer time"} {
		if !slices.Contains(titles, want) {
			t.Errorf("dashboard lacks the panel %q (has %q)", want, titles)
		}
	}

	// promtool checks PromQL in rule files: make one recording rule of
	// each query.
	promtool := tool(t, "promtool", "prometheus")
	var rules bytes.Buffer
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	exprs := dashboardExprs(t)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range exprs {
			if !yield(k) {
				return
			}
		}
	}) {
		q, _ := json.Marshal(grafana.Replace(exprs[name]))
		rules.WriteString("      - record: dashboard_query\n        expr: " + string(q) + "\n")
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, rules.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "check", "rules", file)
}

// TestSystemdUnits runs systemd-analyze verify on each unit, with the
// binary's path pointed at a stand-in (verify checks that it is
// executable), and fails on any complaint, which verify prints without
// failing. Then it checks the hardening: systemd-analyze security scores
// each unit's exposure, and above 2.0 of 10 ("OK" goes to 3.9) is a
// regression.
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	analyze := tool(t, "systemd-analyze", "systemd")
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) != 5 {
		t.Fatalf("systemd/*.service: %v %v, want the gateway, rules service, rls, balancer and relay units", units, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		text := readFile(t, u)
		if !strings.Contains(text, "ExecStart=/usr/local/bin/sluice ") {
			t.Errorf("%s: ExecStart does not run /usr/local/bin/sluice", u)
		}
		for _, want := range []string{"NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes", "ReadOnlyPaths=/etc/sluice", "CapabilityBoundingSet=\n"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", u, strings.TrimSpace(want))
			}
		}
		if strings.Contains(text, "--redis-password ") || strings.Contains(text, "PASSWORD=") {
			t.Errorf("%s puts a password on the command line or in the unit", u)
		}
		local := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(local, []byte(strings.ReplaceAll(text, "/usr/local/bin/sluice", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(analyze, "verify", local)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, stderr.String())
		}
		out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold=20", local).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze security %s: exposure above 2.0 (%v):\n%s", u, err, lastLines(string(out), 3))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestExampleEnvFiles checks that every variable of the example
// environment files is a flag of the command its unit runs (as SLUICE_ and
// the flag's name), a secret the command reads, or a list of extra flags
// the unit passes on: a misspelt variable would otherwise be ignored.
func TestExampleEnvFiles(t *testing.T) {
	t.Parallel()
	secrets := []string{"SLUICE_REDIS_PASSWORD", "SLUICE_READ_TOKEN", "SLUICE_WRITE_TOKEN", "SLUICE_GATEWAY_TOKEN", "SLUICE_BALANCER_TOKEN", "SLUICE_RELAY_TOKEN"}
	for file, command := range map[string]string{
		"example/gateway.env": "gateway", "example/secrets/gateway.env.example": "gateway",
		"example/rules.env": "rules", "example/secrets/rules.env.example": "rules",
		"example/rls.env": "rls", "example/balancer.env": "balancer",
		"example/relay.env": "relay", "example/secrets/relay.env.example": "relay",
	} {
		_, _, help := sluice.Run(t, command, "-h")
		unit := readFile(t, "systemd/sluice-"+command+".service")
		for _, m := range regexp.MustCompile(`(?m)^(SLUICE_\w+)=`).FindAllStringSubmatch(readFile(t, file), -1) {
			name := m[1]
			flag := "-" + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "SLUICE_"), "_", "-"))
			switch {
			case slices.Contains(secrets, name):
			case strings.HasSuffix(name, "_FLAGS"):
				if !strings.Contains(unit, "$"+name) {
					t.Errorf("%s sets %s, which sluice-%s.service does not pass on", file, name, command)
				}
			case !regexp.MustCompile(`(?m)^  ` + flag + `( |$)`).MatchString(help):
				t.Errorf("%s sets %s, but sluice %s has no flag %s", file, name, command, flag)
			}
		}
	}
}

// TestAlertLabels checks what paging and routing rely on: every alert has
// a severity of critical or warning and a runbook_url whose anchor exists
// in docs/operations.md, and some alerts watch that the processes are up
// at all.
func TestAlertLabels(t *testing.T) {
	t.Parallel()
	ops := readFile(t, "../docs/operations.md")
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "prometheus/alerts.yml")), &file); err != nil {
		t.Fatal(err)
	}
	const runbooks = "https://github.com/sluice-rl/sluice/blob/main/docs/operations.md#"
	var up, absent bool
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbooks)
			if !ok || anchor == "" {
				t.Errorf("alert %s: runbook_url %q, want %s and an anchor", r.Alert, url, runbooks)
			} else if !strings.Contains(ops, `<a id="`+anchor+`"></a>`) {
				t.Errorf("alert %s: docs/operations.md has no anchor %q", r.Alert, anchor)
			}
			up = up || strings.Contains(r.Expr, "up{")
			absent = absent || strings.Contains(r.Expr, "absent(")
		}
	}
	if !up || !absent {
		t.Errorf("no alert on up (%v) or on an absent series (%v): a dead process must alert too", up, absent)
	}
}
