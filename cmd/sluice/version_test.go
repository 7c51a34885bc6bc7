package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestVersion(t *testing.T) {
	// The test binary is built without -X: the version falls back to what
	// Go recorded, which for a build inside the module is "devel".
	want := regexp.MustCompile(`^sluice devel \(revision \S+( \(modified\))?, ` + regexp.QuoteMeta(runtime.Version()) + ` \w+/\w+\)\n$`)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, stdout, stderr := sluice.Run(t, args...)
		if code != 0 || !want.MatchString(stdout) || stderr != "" {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want 0 and a line matching %s",
				strings.Join(args, " "), code, stdout, stderr, want)
		}
	}
	testUsage(t, []usageTest{
		{[]string{"version", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"version", "-h"}, 0, "usage: sluice version"},
	})
}

func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(buildInfoCollector()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP sluice_build_info Always 1; the labels say which build of sluice this process runs.
# TYPE sluice_build_info gauge
sluice_build_info{goversion="` + runtime.Version() + `",revision="unknown",version="devel"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_build_info"); err != nil {
		t.Error(err)
	}
}

// TestReleaseConfig builds sluice as .goreleaser.yaml says, with its
// templates filled in, and checks that the version and commit it stamps
// are the ones the binary prints: a -X naming a variable that does not
// exist is silently ignored by the linker, so only running the binary
// proves the stamp took.
func TestReleaseConfig(t *testing.T) {
	b, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Version int `yaml:"version"`
		Builds  []struct {
			Main    string   `yaml:"main"`
			Binary  string   `yaml:"binary"`
			Env     []string `yaml:"env"`
			Flags   []string `yaml:"flags"`
			Ldflags []string `yaml:"ldflags"`
			Goos    []string `yaml:"goos"`
		} `yaml:"builds"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if cfg.Version != 2 || len(cfg.Builds) != 1 {
		t.Fatalf(".goreleaser.yaml: version %d with %d builds, want version 2 with one build", cfg.Version, len(cfg.Builds))
	}
	build := cfg.Builds[0]
	if build.Main != "./cmd/sluice" || build.Binary != "sluice" {
		t.Errorf("build main %q binary %q, want ./cmd/sluice and sluice", build.Main, build.Binary)
	}
	if !slices.Contains(build.Env, "CGO_ENABLED=0") {
		t.Errorf("build env %q lacks CGO_ENABLED=0: release binaries must be static", build.Env)
	}
	const stampedVersion, stampedCommit = "9.8.7-test", "0123456789abcdef0123456789abcdef01234567"
	templates := strings.NewReplacer("{{.Version}}", stampedVersion, "{{.FullCommit}}", stampedCommit)
	ldflags := templates.Replace(strings.Join(build.Ldflags, " "))
	if strings.Contains(ldflags, "{{") {
		t.Fatalf("ldflags %q hold a template this test does not fill in", ldflags)
	}
	for _, x := range []string{"-X main.version=" + stampedVersion, "-X main.revision=" + stampedCommit} {
		if !strings.Contains(ldflags, x) {
			t.Errorf("ldflags %q lack %q", ldflags, x)
		}
	}

	bin := filepath.Join(t.TempDir(), build.Binary)
	args := append([]string{"build", "-o", bin}, build.Flags...)
	args = append(args, "-ldflags", ldflags, "../../"+strings.TrimPrefix(build.Main, "./"))
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), build.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice version: %v\n%s", err, out)
	}
	want := "sluice " + stampedVersion + " (revision " + stampedCommit + ", "
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("the release build prints %q, want it to start with %q", out, want)
	}
}

// TestGoDirective checks that go.mod asks embedders for a minor release of
// Go only (its first patch, as go mod tidy writes it once a dependency
// says 1.26.0), while the toolchain line keeps the patched release the
// project itself is built and tested with.
func TestGoDirective(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	if !regexp.MustCompile(`^1\.\d+(\.0)?$`).Match(m[1]) {
		t.Errorf("go.mod asks for go %s, want a minor release (1.N or 1.N.0): embedders need no more", m[1])
	}
}
