// Package chart_test renders the Helm chart in deploy/helm/sluice for
// several sets of values, with Helm's own Go packages, and decodes every
// manifest as a Kubernetes object, strictly: an unknown or misspelt field
// fails. It is a module of its own so that sluice's module does not depend
// on Helm and Kubernetes.
package chart_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const chartDir = "../sluice"

// serviceMonitor and prometheusRule are the fields of the Prometheus
// Operator's kinds that the chart writes; decoding is strict, so a field
// the chart writes that is not here fails the test.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ruleGroups        `json:"spec"`
}

// rendered is a chart rendered for one set of values, every manifest
// decoded.
type rendered struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	serviceMonitors []serviceMonitor
	rules           []prometheusRule
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	return c
}

// render renders the chart as helm template would, for a cluster of
// Kubernetes 1.30 with the Prometheus Operator's kinds.
func render(t *testing.T, c *chart.Chart, values map[string]any) (string, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly, install.DryRun, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "prod", "sluice"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}
	install.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := install.Run(c, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// decode decodes every manifest of a rendering, strictly.
func decode(t *testing.T, manifest string) rendered {
	t.Helper()
	var r rendered
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(manifest, -1) {
		doc = strings.TrimSpace(regexp.MustCompile(`(?m)^# Source: .*$`).ReplaceAllString(doc, ""))
		if doc == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("a manifest is not YAML: %v\n%s", err, doc)
		}
		if tm.APIVersion == "monitoring.coreos.com/v1" {
			var err error
			switch tm.Kind {
			case "ServiceMonitor":
				var sm serviceMonitor
				err = yaml.UnmarshalStrict([]byte(doc), &sm)
				r.serviceMonitors = append(r.serviceMonitors, sm)
			case "PrometheusRule":
				var pr prometheusRule
				err = yaml.UnmarshalStrict([]byte(doc), &pr)
				r.rules = append(r.rules, pr)
			default:
				err = fmt.Errorf("unexpected kind")
			}
			if err != nil {
				t.Fatalf("%s: %v\n%s", tm.Kind, err, doc)
			}
			continue
		}
		obj, _, err := strict.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s %s does not decode as a Kubernetes object: %v\n%s", tm.APIVersion, tm.Kind, err, doc)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, o)
		case *corev1.Service:
			r.services = append(r.services, o)
		case *corev1.ConfigMap:
			r.configMaps = append(r.configMaps, o)
		case *corev1.Secret:
			r.secrets = append(r.secrets, o)
		default:
			t.Errorf("unexpected object %T", obj)
		}
	}
	return r
}

// secretVars are the variables sluice reads that are not flags.
var secretVars = []string{"SLUICE_REDIS_PASSWORD", "SLUICE_READ_TOKEN", "SLUICE_WRITE_TOKEN", "SLUICE_GATEWAY_TOKEN", "SLUICE_BALANCER_TOKEN", "SLUICE_RELAY_TOKEN"}

// sluiceBin is sluice built out of the main module by TestMain, so that
// the chart can be checked against the real flags and endpoints.
var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chart-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/sluice: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helpOf returns a function giving sluice COMMAND -h.
func helpOf(t *testing.T) func(command string) string {
	t.Helper()
	bin := sluiceBin
	cache := map[string]string{}
	return func(command string) string {
		if h, ok := cache[command]; ok {
			return h
		}
		var stderr bytes.Buffer
		cmd := exec.Command(bin, command, "-h")
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("sluice %s -h: %v\n%s", command, err, stderr.String())
		}
		cache[command] = stderr.String()
		return cache[command]
	}
}

// checkDeployments checks what every workload must have: a non-root pod,
// resources, probes on the health endpoint sluice serves and on ports the
// container declares, listen addresses on those ports, and only variables
// that are flags of the command the container runs (or its secrets).
func checkDeployments(t *testing.T, r rendered, help func(string) string) {
	t.Helper()
	for _, d := range r.deployments {
		pod := d.Spec.Template.Spec
		if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: the pod may run as root", d.Name)
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: the selector %v does not select its own pods (%v)", d.Name, d.Spec.Selector, err)
		}
		for _, c := range pod.Containers {
			where := d.Name + "/" + c.Name
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: resources %v, want a CPU request and a memory limit", where, c.Resources)
			}
			if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: want a read-only root file system and no privilege escalation", where)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				switch {
				case p == nil:
					t.Errorf("%s: no %s probe", where, kind)
				case p.HTTPGet != nil:
					if p.HTTPGet.Path != "/healthz" {
						t.Errorf("%s: %s probe on %s; sluice serves its health at /healthz", where, kind, p.HTTPGet.Path)
					}
					if _, ok := ports[p.HTTPGet.Port.StrVal]; !ok {
						t.Errorf("%s: %s probe on port %v, which the container does not declare (%v)", where, kind, p.HTTPGet.Port, ports)
					}
				case p.TCPSocket != nil:
					if _, ok := ports[p.TCPSocket.Port.StrVal]; !ok {
						t.Errorf("%s: %s probe on port %v, which the container does not declare (%v)", where, kind, p.TCPSocket.Port, ports)
					}
				case p.GRPC != nil:
					if !slices.Contains(mapValues(ports), p.GRPC.Port) {
						t.Errorf("%s: %s probe on gRPC port %d, which the container does not declare (%v)", where, kind, p.GRPC.Port, ports)
					}
				default:
					t.Errorf("%s: %s probe of an unexpected kind", where, kind)
				}
			}
			if len(c.Args) != 1 {
				t.Fatalf("%s: args %q, want the command alone (flags come from the environment)", where, c.Args)
			}
			h := help(c.Args[0])
			for _, e := range c.Env {
				flag := "-" + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Name, "SLUICE_"), "_", "-"))
				if !slices.Contains(secretVars, e.Name) && !regexp.MustCompile(`(?m)^  `+flag+`( |$)`).MatchString(h) {
					t.Errorf("%s: variable %s is no flag of sluice %s", where, e.Name, c.Args[0])
				}
				if strings.HasSuffix(e.Name, "LISTEN") {
					_, port, _ := strings.Cut(e.Value, ":")
					if !slices.Contains(mapValues(ports), int32(atoi(t, port))) {
						t.Errorf("%s: %s=%s is not on a declared port (%v)", where, e.Name, e.Value, ports)
					}
				}
			}
		}
	}
	// Each Service selects a workload's pods, on ports they declare.
	for _, s := range r.services {
		var found bool
		for _, d := range r.deployments {
			if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				continue
			}
			found = true
			for _, sp := range s.Spec.Ports {
				var declared bool
				for _, c := range d.Spec.Template.Spec.Containers {
					for _, p := range c.Ports {
						declared = declared || p.Name == sp.TargetPort.StrVal
					}
				}
				if !declared {
					t.Errorf("service %s: port %s targets %v, which %s does not declare", s.Name, sp.Name, sp.TargetPort, d.Name)
				}
			}
		}
		if !found {
			t.Errorf("service %s selects no workload", s.Name)
		}
	}
}

func mapValues(m map[string]int32) []int32 {
	var v []int32
	for _, p := range m {
		v = append(v, p)
	}
	return v
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return n
}

func names[T any](objs []T, name func(T) string) []string {
	var out []string
	for _, o := range objs {
		out = append(out, name(o))
	}
	slices.Sort(out)
	return out
}

func deploymentNames(r rendered) []string {
	return names(r.deployments, func(d *appsv1.Deployment) string { return d.Name })
}

func env(d *appsv1.Deployment) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		m[e.Name] = e
	}
	return m
}

func find(r rendered, name string) *appsv1.Deployment {
	for _, d := range r.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

const token = "0123456789abcdef0123456789abcdef"

func TestRender(t *testing.T) {
	c := loadChart(t)
	help := helpOf(t)
	full := map[string]any{
		"redis":    map[string]any{"addrs": "rediss://sluice@redis-0.redis:6379,rediss://sluice@redis-1.redis:6379"},
		"secrets":  map[string]any{"redisPassword": "pw", "postgres": "postgres://rules:pw@db/sluice", "readToken": token, "writeToken": token, "gatewayToken": token, "balancerToken": token},
		"gateway":  map[string]any{"upstream": "http://api:9000", "env": map[string]any{"SLUICE_TRUSTED_PROXY": "10.0.0.0/8", "SLUICE_REGION": "eu"}},
		"rules":    map[string]any{"enabled": true},
		"rls":      map[string]any{"enabled": true},
		"balancer": map[string]any{"enabled": true, "regions": []any{"us", "eu"}},
		"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true},
			"dashboard": map[string]any{"enabled": true}},
	}
	for _, tt := range []struct {
		name   string
		values map[string]any
		check  func(t *testing.T, r rendered)
	}{
		{"defaults", nil, func(t *testing.T, r rendered) {
			if got := deploymentNames(r); !slices.Equal(got, []string{"prod-sluice-gateway"}) {
				t.Errorf("deployments %q, want the gateway alone", got)
			}
			e := env(r.deployments[0])
			if _, ok := e["SLUICE_RULES_URL"]; ok {
				t.Error("the gateway follows a rules service that is not deployed")
			}
			if len(r.serviceMonitors)+len(r.rules) > 0 {
				t.Error("monitoring objects rendered without being asked for")
			}
		}},
		{"everything", full, func(t *testing.T, r rendered) {
			want := []string{"prod-sluice-balancer", "prod-sluice-gateway", "prod-sluice-rls", "prod-sluice-rules"}
			if got := deploymentNames(r); !slices.Equal(got, want) {
				t.Errorf("deployments %q, want %q", got, want)
			}
			if got := len(r.serviceMonitors); got != 4 {
				t.Errorf("%d ServiceMonitors, want one per component", got)
			}
			e := env(find(r, "prod-sluice-gateway"))
			if e["SLUICE_RULES_URL"].Value != "http://prod-sluice-rules:8083" || e["SLUICE_REDIS"].Value == "" {
				t.Errorf("gateway: SLUICE_RULES_URL %q and SLUICE_REDIS %q, want the rules service's URL and the Redis seeds",
					e["SLUICE_RULES_URL"].Value, e["SLUICE_REDIS"].Value)
			}
			if ref := e["SLUICE_REDIS_PASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "prod-sluice" {
				t.Errorf("gateway: the Redis password is not read from the chart's Secret: %+v", e["SLUICE_REDIS_PASSWORD"])
			}
			if len(r.secrets) != 1 || len(r.secrets[0].StringData) != 6 {
				t.Errorf("secrets %+v, want one holding the Redis password, the DSN and four tokens", r.secrets)
			}
			checkAlerts(t, r)
			checkDashboard(t, r)
		}},
		{"inline rules", map[string]any{"gateway": map[string]any{"rules": "rules:\n  - scope: default\n    limits: [{name: s, rate: 10, per: 1s}]\n"}},
			func(t *testing.T, r rendered) {
				e := env(r.deployments[0])
				if e["SLUICE_RULES"].Value != "/etc/sluice/rules/rules.yaml" {
					t.Errorf("gateway: SLUICE_RULES %q, want the mounted rules file", e["SLUICE_RULES"].Value)
				}
				if len(r.configMaps) != 1 || !strings.Contains(r.configMaps[0].Data["rules.yaml"], "scope: default") {
					t.Errorf("config maps %+v, want one holding the rules", r.configMaps)
				}
			}},
		{"relay", map[string]any{"redis": map[string]any{"addrs": "redis-0.redis:6379"}, "secrets": map[string]any{"relayToken": token},
			"relay":   map[string]any{"enabled": true, "relays": 6},
			"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}},
			func(t *testing.T, r rendered) {
				want := []string{"prod-sluice-gateway", "prod-sluice-relay"}
				if got := deploymentNames(r); !slices.Equal(got, want) {
					t.Errorf("deployments %q, want %q", got, want)
				}
				gw, rl := env(find(r, "prod-sluice-gateway")), env(find(r, "prod-sluice-relay"))
				if got := gw["SLUICE_RELAY"].Value; got != "http://prod-sluice-relay:8090" {
					t.Errorf("gateway: SLUICE_RELAY %q, want the relays' Service", got)
				}
				for who, e := range map[string]map[string]corev1.EnvVar{"gateway": gw, "relay": rl} {
					if ref := e["SLUICE_RELAY_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Key != "relay-token" {
						t.Errorf("%s: the relay token is not read from the Secret: %+v", who, e["SLUICE_RELAY_TOKEN"])
					}
				}
				if rl["SLUICE_RELAYS"].Value != "6" || rl["SLUICE_REDIS"].Value != "redis-0.redis:6379" {
					t.Errorf("relay: SLUICE_RELAYS %q and SLUICE_REDIS %q, want 6 and the Redis seeds", rl["SLUICE_RELAYS"].Value, rl["SLUICE_REDIS"].Value)
				}
				if got := names(r.serviceMonitors, func(m serviceMonitor) string { return m.Metadata.Name }); !slices.Contains(got, "prod-sluice-relay") {
					t.Errorf("ServiceMonitors %q, want one for the relays", got)
				}
				if len(r.secrets) != 1 || r.secrets[0].StringData["relay-token"] != token {
					t.Errorf("secrets %+v, want the relay token in the chart's Secret", r.secrets)
				}
			}},
		{"existing secret", map[string]any{"secrets": map[string]any{"existingSecret": "mine"}, "rules": map[string]any{"enabled": true}},
			func(t *testing.T, r rendered) {
				if len(r.secrets) != 0 {
					t.Errorf("a Secret is rendered beside the existing one")
				}
				if ref := env(find(r, "prod-sluice-rules"))["SLUICE_POSTGRES"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != "mine" {
					t.Errorf("rules: SLUICE_POSTGRES not read from the existing Secret")
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			manifest, err := render(t, c, tt.values)
			if err != nil {
				t.Fatal(err)
			}
			r := decode(t, manifest)
			checkDeployments(t, r, help)
			tt.check(t, r)
		})
	}
}

// TestRenderRefuses checks that values that cannot work stop the
// rendering with a message saying what to set.
func TestRenderRefuses(t *testing.T) {
	c := loadChart(t)
	for _, tt := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"short token", map[string]any{"secrets": map[string]any{"writeToken": "short"}}, "secrets.writeToken is 5 bytes, want at least 16"},
		{"rules without a database", map[string]any{"rules": map[string]any{"enabled": true}}, "needs secrets.postgres"},
		{"rules without a gateway token", map[string]any{"rules": map[string]any{"enabled": true}, "secrets": map[string]any{"postgres": "postgres://x"}}, "needs secrets.gatewayToken"},
		{"balancer without regions", map[string]any{"balancer": map[string]any{"enabled": true}}, "needs balancer.regions"},
		{"relay without Redis", map[string]any{"relay": map[string]any{"enabled": true}, "secrets": map[string]any{"relayToken": token}}, "needs redis.addrs"},
		{"relay without a token", map[string]any{"relay": map[string]any{"enabled": true}, "redis": map[string]any{"addrs": "redis:6379"}}, "needs secrets.relayToken"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, c, tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("rendering gave %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// checkAlerts wants the PrometheusRule to hold deploy/prometheus/alerts.yml
// as it is.
func checkAlerts(t *testing.T, r rendered) {
	t.Helper()
	if len(r.rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(r.rules))
	}
	b, err := os.ReadFile("../../prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var want ruleGroups
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	if len(want.Groups) == 0 || !reflect.DeepEqual(r.rules[0].Spec, want) {
		t.Errorf("the PrometheusRule's groups differ from alerts.yml's")
	}
}

// checkDashboard wants the dashboard ConfigMap to hold
// deploy/grafana/sluice.json, as valid JSON.
func checkDashboard(t *testing.T, r rendered) {
	t.Helper()
	b, err := os.ReadFile("../../grafana/sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range r.configMaps {
		if got, ok := cm.Data["sluice.json"]; ok {
			if strings.TrimSpace(got) != strings.TrimSpace(string(b)) || !json.Valid([]byte(got)) {
				t.Errorf("config map %s does not hold deploy/grafana/sluice.json as it is", cm.Name)
			}
			if cm.Labels["grafana_dashboard"] != "1" {
				t.Errorf("config map %s lacks the grafana_dashboard label the sidecar looks for", cm.Name)
			}
			return
		}
	}
	t.Error("no config map holds the dashboard")
}
