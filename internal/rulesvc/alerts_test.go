package rulesvc_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
)

// TestAlertsParseAndNameRealMetrics reads deploy/prometheus/alerts.yml as
// Prometheus would (a rule file of groups) and checks that every metric
// the expressions of its sluice-rules group name is one the client or the
// service exports.
func TestAlertsParseAndNameRealMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("alerts.yml does not parse as a rule file: %v", err)
	}

	reg := prometheus.NewRegistry()
	startReplica(t, newSchema(t), rulesvc.Config{Registerer: reg})
	if _, err := rulesync.New(rulesync.Config{URL: "http://127.0.0.1:1", Gateway: "gw", Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"sluice_rulesvc_gateways": true} // a vector with no gateway yet
	for _, mf := range mfs {
		known[mf.GetName()] = true
	}

	alerts := map[string]string{}
	metric := regexp.MustCompile(`sluice_[a-z_]+`)
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("group %s: rule %q needs alert, expr, a severity and a summary", g.Name, r.Alert)
			}
			alerts[r.Alert] = r.Expr
			if g.Name != "sluice-rules" {
				// The gateways' alerts: deploy/deploy_test.go checks them
				// against a running gateway.
				continue
			}
			for _, name := range metric.FindAllString(r.Expr, -1) {
				if !known[name] {
					t.Errorf("alert %s: metric %s is not exported", r.Alert, name)
				}
			}
		}
	}
	if got, want := alerts["SluiceRulesSnapshotStale"], "sluice_rules_snapshot_age_seconds > 60"; got != want {
		t.Errorf("stale snapshot alert: got expr %q, want %q", got, want)
	}
}
