package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/pipeline"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// sluice is the binary the end-to-end tests run, built on first use.
var sluice proctest.Binary

func TestMain(m *testing.M) { os.Exit(sluice.RunTests(m)) }

// get sends a request with headers given as name, value pairs and returns
// the response with its body read.
func get(t *testing.T, method, url string, header ...string) (*http.Response, string) {
	t.Helper()
	return proctest.Do(t, method, url, header...)
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

// usageTest is a command line and what running it must give.
type usageTest struct {
	args     []string
	wantCode int
	want     string // in stdout or stderr
}

// testUsage runs each command line to completion, a subtest each, and
// checks its exit code and output.
func testUsage(t *testing.T, tests []usageTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := sluice.Run(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
			if !strings.Contains(stdout+stderr, tt.want) {
				t.Errorf("output lacks %q:\nstdout:\n%s\nstderr:\n%s", tt.want, stdout, stderr)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	testUsage(t, []usageTest{
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
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--upstream-tls-ca", "ca.crt"}, 1, "--upstream-tls-* need --upstream"},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--upstream-tls-ca", "ca.crt"}, 1, `--upstream-tls-* need an https --upstream, not "http://127.0.0.1:1"`},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--upstream", "https://127.0.0.1:1", "--upstream-tls-ca", "no-such.crt"}, 1, "--upstream-tls-*: upstream TLS authority: open no-such.crt"},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--upstream-idle-conns", "0"}, 1, "--upstream-idle-conns 0: want at least 1"},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--upstream-response-timeout", "-1s"}, 1, "--upstream-*-timeout: want 0 (no bound) or a positive duration"},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--redis", "127.0.0.1:1", "--store-timeout", "3ms"}, 1, "--store-timeout 3ms is not above --redis-timeout 5ms"},
		{[]string{"gateway", "--listen", "127.0.0.1:0", "--redis", "127.0.0.1:1", "--redis-timeout", "50ms", "--store-timeout", "50ms"}, 1, "--store-timeout 50ms is not above --redis-timeout 50ms"},
		// A gateway starts while Redis is down; a benchmark of it would
		// measure the local fallback, so it does not.
		{[]string{"bench", "--redis", "127.0.0.1:1"}, 1, "--redis 127.0.0.1:1: Redis cannot be reached"},
	})
}

func TestGatewayFlagDefaults(t *testing.T) {
	// "sluice gateway" with no flags: the fixed default address, the
	// built-in rules and answer, the in-process store, no metrics.
	opts, err := parseGatewayFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := gatewayOptions{Listen: "127.0.0.1:8080", ReadTimeout: time.Minute, runFlags: runFlags{ShutdownTimeout: defaultShutdownTimeout},
		Pipeline: pipeline.Config{Guard: guard.Config{Timeout: 5 * time.Millisecond, MaxQueue: time.Second, TripAfter: 5, Pause: 2 * time.Second, Slack: 2}},
		Shares:   shareOptions{Interval: 10 * time.Second, Stale: 5 * time.Minute},
		UpstreamConns: upstreamFlags{idleConns: 256, dial: 5 * time.Second, tlsHandshake: 5 * time.Second,
			response: 30 * time.Second, idle: 90 * time.Second}}
	if fmt.Sprint(opts) != fmt.Sprint(want) {
		t.Errorf("defaults %+v, want %+v", opts, want)
	}
	opts, err = parseGatewayFlags([]string{"--redis", "a:1, b:2,", "--trusted-proxy", "10.0.0.0/8,192.0.2.1", "--unknown-keys-as-address"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.UnknownKeys {
		t.Error("--unknown-keys-as-address not parsed")
	}
	if got := fmt.Sprint(opts.Redis.Addrs, opts.TrustedProxies); got != "[a:1 b:2] [10.0.0.0/8 192.0.2.1/32]" {
		t.Errorf("--redis and --trusted-proxy parsed as %s, want [a:1 b:2] [10.0.0.0/8 192.0.2.1/32]", got)
	}
}

func TestGatewayIdentityFlags(t *testing.T) {
	opts, err := parseGatewayFlags([]string{"--rules-url", "http://127.0.0.1:1/", "--gateway-id", "gw-eu-7", "--region", "eu"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.GatewayID != "gw-eu-7" || opts.Region != "eu" {
		t.Errorf("--gateway-id and --region parsed as %q and %q, want gw-eu-7 and eu", opts.GatewayID, opts.Region)
	}
}

// TestConcurrencySlotTimeoutFlag: --concurrency-slot-timeout reaches the
// pipeline's concurrency slots, and a negative one is a usage error that
// names the flag, before anything starts.
func TestConcurrencySlotTimeoutFlag(t *testing.T) {
	opts, err := parseGatewayFlags([]string{"--concurrency-slot-timeout", "90s"}, io.Discard)
	if err != nil || opts.Pipeline.Inflight.Timeout != 90*time.Second {
		t.Errorf("--concurrency-slot-timeout 90s: got %v, %v; want the slots' timeout 90s", opts.Pipeline.Inflight.Timeout, err)
	}
	var out strings.Builder
	_, err = parseGatewayFlags([]string{"--concurrency-slot-timeout", "-1s"}, &out)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(out.String(), "--concurrency-slot-timeout -1s: must not be negative") {
		t.Errorf("--concurrency-slot-timeout -1s: got %v, printed %q; want a usage error naming the flag", err, out.String())
	}
}
