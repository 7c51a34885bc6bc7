package browser

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// BuildSluice builds cmd/sluice from this repository into a temporary
// directory of the test and returns the binary's path.
func BuildSluice(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	return bin
}

// Process is a sluice server the test started with StartSluice. The test
// owns it: its cleanup kills it and, when the test failed, logs its
// output.
type Process struct {
	// URL is where it serves, MetricsURL where its metrics listener
	// serves (without /metrics), or "".
	URL, MetricsURL string
	Stdout, Stderr  proctest.Buffer
}

var (
	listeningRE = regexp.MustCompile(`listening on (http://\S+)`)
	metricsRE   = regexp.MustCompile(`metrics on (http://\S+)/metrics`)
)

// StartSluice runs bin with args and env (added to the test's) and waits up
// to 30 seconds until it prints where it listens.
func StartSluice(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &p.Stdout, &p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("sluice %v\nstdout:\n%s\nstderr:\n%s", args, p.Stdout.String(), p.Stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := p.Stdout.String()
		if m := listeningRE.FindStringSubmatch(out); m != nil {
			p.URL = m[1]
			if m := metricsRE.FindStringSubmatch(out); m != nil {
				p.MetricsURL = m[1]
			}
			return p
		}
		select {
		case <-done:
			t.Fatalf("sluice %v exited before listening\nstderr:\n%s", args, p.Stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice %v did not say where it listens within 30s\nstderr:\n%s", args, p.Stderr.String())
		}
	}
}
