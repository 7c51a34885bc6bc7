package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

func TestEnvName(t *testing.T) {
	for _, tt := range []struct{ flag, want string }{
		{"listen", "SLUICE_LISTEN"},
		{"redis-tls-server-name", "SLUICE_REDIS_TLS_SERVER_NAME"},
		{"gateway-id", "SLUICE_GATEWAY_ID"},
		{"postgres", "SLUICE_POSTGRES"},
	} {
		if got := envName(tt.flag); got != tt.want {
			t.Errorf("envName(%q) = %q, want %q", tt.flag, got, tt.want)
		}
	}
}

// TestEnvEqualsFlags parses each server command's flags twice, once from
// the command line and once from the environment, and wants the same
// options; and once more with no flags, to be sure the values differ from
// the defaults.
func TestEnvEqualsFlags(t *testing.T) {
	parse := func(f func([]string, io.Writer) (any, error)) func([]string) (any, error) {
		return func(args []string) (any, error) { return f(args, io.Discard) }
	}
	for _, tt := range []struct {
		command string
		parse   func([]string) (any, error)
		flags   []string // name, value pairs; a value of "" is a boolean flag
		base    []string // flags both runs need
	}{
		{"gateway", parse(func(a []string, w io.Writer) (any, error) { return parseGatewayFlags(a, w) }),
			[]string{"listen", "127.0.0.1:9999", "redis", "127.0.0.1:6380,127.0.0.1:6381", "redis-timeout", "7ms",
				"unknown-keys-as-address", "", "trusted-proxy", "10.0.0.0/8,192.0.2.1", "log-level", "debug", "gateway-id", "gw-7"}, nil},
		{"rls", parse(func(a []string, w io.Writer) (any, error) { return parseRLSFlags(a, w) }),
			[]string{"config", "ratelimit.yaml", "near-limit-ratio", "0.5", "shadow-mode", "", "max-connection-age", "1m", "no-leases", ""}, nil},
		{"rules", parse(func(a []string, w io.Writer) (any, error) { return parseRulesFlags(a, w) }),
			[]string{"postgres", "postgres://u@db/x", "max-override", "2d", "canary-fraction", "0.3", "no-canary", "", "listen", "127.0.0.1:9998"}, nil},
		{"balancer", parse(func(a []string, w io.Writer) (any, error) { return parseBalancerFlags(a, w) }),
			[]string{"regions", "us,eu", "interval", "20s", "trusted-network", "", "min-share", "0.1"}, nil},
	} {
		t.Run(tt.command, func(t *testing.T) {
			var args []string
			env := map[string]string{}
			for i := 0; i < len(tt.flags); i += 2 {
				name, value := tt.flags[i], tt.flags[i+1]
				if value == "" {
					args = append(args, "--"+name)
					env[envName(name)] = "true"
				} else {
					args = append(args, "--"+name, value)
					env[envName(name)] = value
				}
			}
			fromFlags, err := tt.parse(args)
			if err != nil {
				t.Fatalf("flags %q: %v", args, err)
			}
			defaults, _ := tt.parse(nil)
			for k, v := range env {
				t.Setenv(k, v)
			}
			fromEnv, err := tt.parse(nil)
			if err != nil {
				t.Fatalf("environment %v: %v", env, err)
			}
			if got, want := fmt.Sprintf("%+v", fromEnv), fmt.Sprintf("%+v", fromFlags); got != want {
				t.Errorf("from the environment %v:\n%s\nwant, as from flags %q:\n%s", env, got, args, want)
			}
			if fmt.Sprintf("%+v", defaults) == fmt.Sprintf("%+v", fromFlags) {
				t.Errorf("flags %q give the defaults: the test proves nothing", args)
			}
		})
	}
}

// TestFlagBeatsEnv checks that a flag on the command line wins over its
// variable, even an invalid one, which is then not read at all.
func TestFlagBeatsEnv(t *testing.T) {
	t.Setenv("SLUICE_LISTEN", "127.0.0.1:1111")
	t.Setenv("SLUICE_READ_TIMEOUT", "soon")
	t.Setenv("SLUICE_UPSTREAM", "")
	opts, err := parseGatewayFlags([]string{"--listen", "127.0.0.1:2222", "--read-timeout", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Listen != "127.0.0.1:2222" || opts.ReadTimeout.String() != "5s" {
		t.Errorf("--listen and --read-timeout parsed as %q and %v, want the flags' 127.0.0.1:2222 and 5s", opts.Listen, opts.ReadTimeout)
	}
	opts, err = parseGatewayFlags([]string{"--read-timeout", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Listen != "127.0.0.1:1111" {
		t.Errorf("--listen is %q, want $SLUICE_LISTEN's 127.0.0.1:1111", opts.Listen)
	}
}

// runEnv runs the binary with args and env added to the test's
// environment, and returns its exit code and output.
func runEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin, err := sluice.Path()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestEnvBadValue gives each command an invalid value in one variable and
// wants a usage error (exit 2) that names the variable, its value and the
// flag, before anything starts.
func TestEnvBadValue(t *testing.T) {
	for _, tt := range []struct {
		command, name, value string
	}{
		{"gateway", "SLUICE_READ_TIMEOUT", "soon"},
		{"rules", "SLUICE_CANARY_FRACTION", "most"},
		{"rules", "SLUICE_MAX_OVERRIDE", "a week"},
		{"rls", "SLUICE_SHADOW_MODE", "maybe"},
		{"balancer", "SLUICE_REGIONS", ","},
		{"bench", "SLUICE_CONCURRENCY", "many"},
		{"plan", "SLUICE_PEAK_RPS", "lots"},
	} {
		t.Run(tt.command+" "+tt.name, func(t *testing.T) {
			code, stdout, stderr := runEnv(t, []string{tt.name + "=" + tt.value}, tt.command)
			flagName := "--" + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(tt.name, "SLUICE_"), "_", "-"))
			want := fmt.Sprintf("$%s=%q: invalid value for %s: ", tt.name, tt.value, flagName)
			if code != 2 || !strings.HasPrefix(stderr, want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 2, nothing on stdout, and stderr starting %q", code, stdout, stderr, want)
			}
		})
	}
}

// TestPlanFromEnv runs sluice plan with its inputs as flags and as
// variables, and wants the same table, one unlike the defaults'.
func TestPlanFromEnv(t *testing.T) {
	_, defaults, _ := runEnv(t, nil, "plan")
	code, fromFlags, stderr := runEnv(t, nil, "plan", "--peak-rps", "8000", "--redis-share", "0.1")
	if code != 0 {
		t.Fatalf("plan with flags: exit %d: %s", code, stderr)
	}
	code, fromEnv, stderr := runEnv(t, []string{"SLUICE_PEAK_RPS=8000", "SLUICE_REDIS_SHARE=0.1"}, "plan")
	if code != 0 {
		t.Fatalf("plan with variables: exit %d: %s", code, stderr)
	}
	if fromEnv != fromFlags || fromFlags == defaults {
		t.Errorf("plan from variables:\n%s\nwant, as from flags:\n%s\nwhich differs from the defaults':\n%s", fromEnv, fromFlags, defaults)
	}
}

// TestEveryCommandUsage runs each command with -h and with a flag it does
// not have: help exits 0 and prints the usage line, the environment rule
// and the flags; a mistake exits 2.
func TestEveryCommandUsage(t *testing.T) {
	var tests []usageTest
	for _, c := range commands() {
		tests = append(tests,
			usageTest{[]string{c.name, "-h"}, 0, "usage: sluice " + c.name},
			usageTest{[]string{c.name, "--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag\nusage: sluice " + c.name},
		)
		surplus := []string{c.name, "surplus"}
		switch c.name {
		case "check":
			// check takes one FILE; a second argument is the stray one.
			surplus = []string{c.name, "rules.yaml", "surplus"}
		case "explain":
			// explain takes one KEY.
			surplus = []string{c.name, "key_a", "surplus"}
		}
		tests = append(tests, usageTest{surplus, 2, `unexpected argument "surplus"`})
		if c.name != "version" {
			tests = append(tests, usageTest{[]string{c.name, "-h"}, 0, "can also be set in the environment: --"})
		}
	}
	testUsage(t, tests)
}

// TestHelpSaysWhatTheCommandHas checks that flags shared between commands
// explain themselves in the terms of the command that shows them.
func TestHelpSaysWhatTheCommandHas(t *testing.T) {
	for _, command := range []string{"rls", "bench"} {
		_, _, help := sluice.Run(t, command, "-h")
		gateways := regexp.MustCompile(`(?m)^  -gateways .*\n\s+(.*)$`).FindStringSubmatch(help)
		if gateways == nil {
			t.Fatalf("sluice %s -h lists no --gateways:\n%s", command, help)
		}
		if strings.Contains(gateways[1], "rules service") {
			t.Errorf("sluice %s -h: --gateways says %q; the command has no rules service", command, gateways[1])
		}
	}
}

// TestDefaultListenDiffer checks that the servers' default addresses
// differ, so that any two run on one host with no flags.
func TestDefaultListenDiffer(t *testing.T) {
	seen := map[string]string{}
	listen := regexp.MustCompile(`(?m)^  -(listen|http-listen|metrics-listen) address\n.*\(default "([^"]+)"\)$`)
	for _, c := range commands() {
		_, _, help := sluice.Run(t, c.name, "-h")
		for _, m := range listen.FindAllStringSubmatch(help, -1) {
			addr := m[2]
			if other, ok := seen[addr]; ok {
				t.Errorf("sluice %s --%s and %s both default to %s", c.name, m[1], other, addr)
			}
			seen[addr] = "sluice " + c.name + " --" + m[1]
		}
	}
	if len(seen) < 4 {
		t.Errorf("found %d default addresses (%v), want those of gateway, rules, rls and balancer", len(seen), seen)
	}
}
