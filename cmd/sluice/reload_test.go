package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reloadCount reads sluice_rules_reload_total{result} from a gateway's
// metrics.
func reloadCount(t *testing.T, metricsURL, result string) int {
	t.Helper()
	_, body := get(t, "GET", metricsURL+"/metrics")
	m := regexp.MustCompile(`(?m)^sluice_rules_reload_total\{result="` + result + `"\} (\d+)`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no sluice_rules_reload_total{result=%q} in the metrics", result)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// clampRules is a rules file whose default limit lets one request an hour
// through when clamp is set, and 1000 a second otherwise.
func clampRules(clamp bool) string {
	if clamp {
		return "rules:\n  - scope: default\n    limits: [{name: clamp, rate: 1, per: 1h}]\n"
	}
	return "rules:\n  - scope: default\n    limits: [{name: s, rate: 1000, per: 1s}]\n"
}

// A gateway with --rules reloads the file on SIGHUP and when it changes;
// a file that does not validate keeps the old rules, says why, and is
// counted. SIGHUP never ends it.
func TestGatewayReloadsRulesFile(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "rules.yaml", clampRules(false))
	gw := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--rules", file)
	statuses := func(key string) string {
		var out []int
		for range 2 {
			resp, _ := get(t, "GET", gw.URL+"/v1/items", "X-API-Key", key)
			out = append(out, resp.StatusCode)
		}
		return fmt.Sprint(out)
	}
	if got := statuses("k1"); got != "[200 200]" {
		t.Fatalf("before any reload: got %s, want [200 200]", got)
	}

	// SIGHUP with the file as it was: reread, nothing changes.
	gw.Signal(t, syscall.SIGHUP)
	waitFor(t, func() bool { return reloadCount(t, gw.MetricsURL, "unchanged") == 1 })

	// A change is picked up by itself, SIGHUP or not.
	if err := os.WriteFile(file, []byte(clampRules(true)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return reloadCount(t, gw.MetricsURL, "ok") == 1 })
	if got := statuses("k2"); got != "[200 429]" {
		t.Errorf("after the clamp: got %s, want [200 429]", got)
	}

	// A broken file keeps the clamp, and says why.
	if err := os.WriteFile(file, []byte("rules:\n  - scope: default\n    limits: [{name: s, rate: -1, per: 1s}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gw.Signal(t, syscall.SIGHUP)
	waitFor(t, func() bool { return reloadCount(t, gw.MetricsURL, "invalid") >= 1 })
	if got := statuses("k3"); got != "[200 429]" {
		t.Errorf("after a broken file: got %s, want the clamp kept, [200 429]", got)
	}
	if log := gw.Stderr(); !strings.Contains(log, "rules file not reloaded; keeping the rules in force") || !strings.Contains(log, "rate") {
		t.Errorf("the log does not say the broken file was refused and why:\n%s", log)
	}
	if _, body := get(t, "GET", gw.MetricsURL+"/metrics"); !strings.Contains(body, "sluice_rules_reload_last_success_timestamp_seconds ") {
		t.Errorf("no sluice_rules_reload_last_success_timestamp_seconds in the metrics")
	}
	if got := reloadCount(t, gw.MetricsURL, "ok"); got != 1 {
		t.Errorf("got %d successful reloads, want 1", got)
	}
	gw.Signal(t, syscall.SIGTERM)
	if code := gw.Wait(t); code != 0 {
		t.Errorf("after SIGTERM: got exit %d, want 0", code)
	}
}

// SIGHUP ends no command: sluice rls rereads its configuration, and a
// gateway without a rules file and the balancer carry on.
func TestSIGHUPEndsNoCommand(t *testing.T) {
	t.Parallel()
	config := writeFile(t, "rls.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	rls := sluice.Start(t, "rls", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--config", config)
	gw := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0")
	bal := sluice.Start(t, "balancer", "--listen", "127.0.0.1:0", "--regions", "us,eu", "--trusted-network")
	for _, p := range []interface {
		Signal(testing.TB, os.Signal)
	}{rls, gw, bal} {
		p.Signal(t, syscall.SIGHUP)
	}
	waitFor(t, func() bool {
		return strings.Contains(rls.Stderr(), "SIGHUP: rls config reread")
	})
	time.Sleep(200 * time.Millisecond)
	waitFor(t, func() bool {
		return strings.Contains(gw.Stderr(), "SIGHUP: the built-in demo rules have no file to reload")
	})
	if resp, _ := get(t, "GET", gw.URL+"/v1/items"); resp.StatusCode != 200 {
		t.Errorf("gateway after SIGHUP: got %d, want 200", resp.StatusCode)
	}
	if resp, _ := get(t, "GET", rls.URL+"/healthz"); resp.StatusCode != 200 {
		t.Errorf("rls after SIGHUP: got %d, want 200", resp.StatusCode)
	}
	if resp, _ := get(t, "GET", bal.URL+"/metrics"); resp.StatusCode != 200 {
		t.Errorf("balancer after SIGHUP: got %d, want 200", resp.StatusCode)
	}
}
