// Package proctest runs the sluice binary as a child process for end-to-end
// tests: [Binary] builds cmd/sluice once per test binary, [Binary.Start]
// starts a server (gateway or rules service) and waits until it prints
// where it listens, and [Binary.Run] runs a command to completion.
//
// The processes are real: tests reach them over HTTP and end them with
// signals. A process belongs to the test that started it, whose cleanup
// kills it and, when the test failed, logs what it printed. Nothing stops
// a process if the test binary itself is killed (say, by go test's
// -timeout).
package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// module and mainPackage are what Binary builds, in the module's own
// directory (as go list finds it), so that a test in any package of the
// module, or of a module that replaces it with its directory (such as
// test/browser), can build it.
const (
	module      = "github.com/sluice-rl/sluice"
	mainPackage = "./cmd/sluice"
)

// Timeouts for loaded test machines: a process that starts in milliseconds
// may take seconds when every package's tests run at once.
const (
	listenTimeout = 30 * time.Second // Start: until "listening on"
	exitTimeout   = 60 * time.Second // Wait and Run: until the process exits
)

var (
	listeningRE = regexp.MustCompile(`listening on (http://\S+)`)
	metricsRE   = regexp.MustCompile(`metrics on (http://\S+)/metrics`)
)

var errClosed = errors.New("proctest: Binary used after Close")

// Binary is the sluice binary, built with "go build" on first use into a
// temporary directory and reused by every later call. The zero value is
// ready to use. Its methods are safe for concurrent use, but for Close,
// which removes the build once the tests are done; a TestMain with nothing
// else to do leaves that to RunTests:
//
//	var sluice proctest.Binary
//
//	func TestMain(m *testing.M) { os.Exit(sluice.RunTests(m)) }
type Binary struct {
	once sync.Once
	dir  string // set by once: the build's directory, which Close removes
	path string // set by once: the executable
	err  error  // set by once: why the build failed
}

// Path returns the binary's path, building it on the first call. A failed
// build's error, with the compiler's output, is returned on every call.
func (b *Binary) Path() (string, error) {
	b.once.Do(b.build)
	return b.path, b.err
}

func (b *Binary) build() {
	dir, err := os.MkdirTemp("", "proctest-sluice-")
	if err != nil {
		b.err = fmt.Errorf("proctest: %w", err)
		return
	}
	path := filepath.Join(dir, "sluice")
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	build := exec.Command("go", "build", "-o", path, mainPackage)
	build.Dir = strings.TrimSpace(string(root))
	var out []byte
	if err == nil {
		out, err = build.CombinedOutput()
	}
	if err != nil {
		os.RemoveAll(dir)
		b.err = fmt.Errorf("proctest: go build %s in %s: %w\n%s", mainPackage, module, err, out)
		return
	}
	b.dir, b.path = dir, path
}

// Close removes the binary if it was built. Later calls to Path, Start or
// Run fail. Processes still running keep their copy of the executable.
func (b *Binary) Close() {
	b.once.Do(func() { b.err = errClosed })
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// RunTests runs a test package's tests, then Close, and returns m.Run's
// exit code.
func (b *Binary) RunTests(m *testing.M) int {
	defer b.Close()
	return m.Run()
}

// Run runs the binary with args to completion and returns its exit code
// and output. It fails the test if the binary cannot be built or run, or
// is still running after a minute.
func (b *Binary) Run(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin, err := b.Path()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), exitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sluice %s: still running after %v", strings.Join(args, " "), exitTimeout)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// Start runs the binary with args, in the test's environment, and waits
// until it prints "listening on http://...". See StartEnv.
func (b *Binary) Start(t testing.TB, args ...string) *Process {
	t.Helper()
	return b.StartEnv(t, nil, args...)
}

// StartEnv runs the binary with args and env ("NAME=value" entries added
// to the test's environment) and waits until it prints "listening on
// http://...". It fails the test if the process exits first or has not
// printed it within 30 seconds. The test's cleanup kills the process and,
// if the test failed, logs its output.
func (b *Binary) StartEnv(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	bin, err := b.Path()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: exec.Command(bin, args...), args: strings.Join(args, " "), done: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("sluice %s\nstdout:\n%s\nstderr:\n%s", p.args, p.Stdout(), p.Stderr())
		}
	})
	deadline := time.Now().Add(listenTimeout)
	for {
		out := p.Stdout()
		if m := listeningRE.FindStringSubmatch(out); m != nil {
			p.URL = m[1]
			if m := metricsRE.FindStringSubmatch(out); m != nil {
				p.MetricsURL = m[1]
			}
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("sluice %s exited before listening: %v\nstderr:\n%s", p.args, p.exitErr, p.Stderr())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice %s did not print where it listens within %v\nstderr:\n%s", p.args, listenTimeout, p.Stderr())
		}
	}
}

// Process is a running sluice server started by Start or StartEnv. Its
// methods are safe for concurrent use. The test that started it owns it:
// its cleanup kills the process if it is still running.
type Process struct {
	// URL is where the process serves, as it printed it ("listening on
	// http://..."), and MetricsURL where its metrics listener serves
	// (without the /metrics path), or "" if it printed none.
	URL, MetricsURL string

	cmd            *exec.Cmd
	args           string // the command line, for messages
	stdout, stderr Buffer
	done           chan struct{} // closed when the process has exited
	exitErr        error         // set before done is closed
}

// Stdout returns what the process has written to its standard output so
// far.
func (p *Process) Stdout() string { return p.stdout.String() }

// Stderr returns what the process has written to its standard error so
// far: its logs.
func (p *Process) Stderr() string { return p.stderr.String() }

// Kill ends the process at once, as a crash would, and waits until it has
// exited. Killing a process that has exited does nothing.
func (p *Process) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// Signal sends sig to the process, failing the test if it cannot.
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Wait waits for the process to exit and returns its exit code (-1 if a
// signal ended it). It fails the test if the process is still running
// after a minute.
func (p *Process) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(exitTimeout):
		t.Fatalf("sluice %s did not exit within %v", p.args, exitTimeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// Buffer collects output that one goroutine writes while another reads it:
// a process's output copied by exec, or a logger's lines read by a test. The
// zero value is an empty buffer; it is safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
