package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sluiceBin is the sluice binary TestMain builds for the end-to-end tests.
var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build sluice: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer collects a process's output; safe for the process's copier
// and the test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a running sluice binary. The test that started it owns it:
// Cleanup kills it if it is still running.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{} // closed when the process has exited
	exitErr        error         // set before done is closed

	// URL is where the gateway serves, and MetricsURL its metrics
	// listener, as the process printed them.
	URL, MetricsURL string
}

var (
	listeningRE = regexp.MustCompile(`listening on (http://\S+)`)
	metricsRE   = regexp.MustCompile(`metrics on (http://\S+)/metrics`)
)

// startSluice starts the binary with args and waits until it prints where
// it listens.
func startSluice(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(sluiceBin, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("sluice %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), p.stdout, p.stderr)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := listeningRE.FindStringSubmatch(p.stdout.String()); m != nil {
			p.URL = m[1]
			if m := metricsRE.FindStringSubmatch(p.stdout.String()); m != nil {
				p.MetricsURL = m[1]
			}
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("sluice %s exited before listening: %v\nstderr:\n%s", strings.Join(args, " "), p.exitErr, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice %s did not print where it listens within 30s", strings.Join(args, " "))
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("sluice did not exit within 60s")
	}
	return p.cmd.ProcessState.ExitCode()
}

// runSluice runs the binary to completion and returns its exit code and
// output.
func runSluice(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sluice %s: still running after 60s", strings.Join(args, " "))
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// get sends a request with headers given as name, value pairs and returns
// the response with its body read.
func get(t *testing.T, method, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// writeFile writes content to name in a new temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		want     string // in stdout or stderr
	}{
		{nil, 2, "usage: sluice COMMAND"},
		{[]string{"help"}, 0, "gateway"},
		{[]string{"nonsense"}, 2, `unknown command "nonsense"`},
		{[]string{"gateway", "-h"}, 0, "-upstream URL"},
		{[]string{"gateway", "--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{[]string{"gateway", "--trusted-proxy", "10.0.0.0/33"}, 2, `"10.0.0.0/33" is not a CIDR`},
		{[]string{"gateway", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--rules-cache", "x.json"}, 1, "--rules-cache needs --rules-url"},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--rules", "a.yaml", "--rules-url", "http://127.0.0.1:1/"}, 1, "choose one"},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--upstream", "ftp://x"}, 1, `--upstream "ftp://x"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runSluice(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
			if !strings.Contains(stdout+stderr, tt.want) {
				t.Errorf("output lacks %q:\nstdout:\n%s\nstderr:\n%s", tt.want, stdout, stderr)
			}
		})
	}
}

func TestGatewayFlagDefaults(t *testing.T) {
	// "sluice gateway" with no flags: the fixed default address, the
	// built-in rules and answer, the in-process store, no metrics.
	opts, err := parseGatewayFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := gatewayOptions{Listen: "127.0.0.1:8080", ShutdownTimeout: defaultShutdownTimeout}
	if fmt.Sprint(opts) != fmt.Sprint(want) {
		t.Errorf("defaults %+v, want %+v", opts, want)
	}
	opts, err = parseGatewayFlags([]string{"--redis", "a:1, b:2,", "--trusted-proxy", "10.0.0.0/8,192.0.2.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(opts.Redis, opts.TrustedProxies); got != "[a:1 b:2] [10.0.0.0/8 192.0.2.1/32]" {
		t.Errorf("--redis and --trusted-proxy parsed as %s, want [a:1 b:2] [10.0.0.0/8 192.0.2.1/32]", got)
	}
}

// signal sends sig to the process.
func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}
