package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRulesUsage(t *testing.T) {
	dir := t.TempDir()
	shortSecret := filepath.Join(dir, "short.yaml")
	if err := os.WriteFile(shortSecret, []byte("- {name: ops, secret: tooshort, role: write}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badRole := filepath.Join(dir, "role.yaml")
	if err := os.WriteFile(badRole, []byte("- {name: ops, secret: 0123456789abcdef, role: admin}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknownField := filepath.Join(dir, "field.yaml")
	if err := os.WriteFile(unknownField, []byte("- {name: ops, secret: 0123456789abcdef, role: write, colour: red}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badBound := filepath.Join(dir, "bound.yaml")
	if err := os.WriteFile(badBound, []byte("- {name: ops, secret: 0123456789abcdef, role: write, max_gateways: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dsn := "postgres://postgres@127.0.0.1:1/none"
	testUsage(t, []usageTest{
		{[]string{"help"}, 0, "rules "},
		{[]string{"rules", "-h"}, 0, "usage: sluice rules --postgres DSN"},
		{[]string{"rules", "--max-override", "3x"}, 2, `period "3x"`},
		{[]string{"rules", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"rules"}, 1, "--postgres is empty"},
		{[]string{"rules", "--postgres", dsn, "--tokens", filepath.Join(dir, "missing.yaml")}, 1, "--tokens"},
		{[]string{"rules", "--postgres", dsn, "--tokens", shortSecret}, 1, "secret is 8 bytes, want at least 16"},
		{[]string{"rules", "--postgres", dsn, "--tokens", badRole}, 1, `role "admin" is not read, write or gateway`},
		{[]string{"rules", "--postgres", dsn, "--tokens", unknownField}, 1, "field colour not found"},
		{[]string{"rules", "--postgres", dsn, "--tokens", badBound}, 1, "max_gateways 3: want a positive bound, on a gateway token only"},
		{[]string{"rules", "--postgres", dsn, "--schema", "Bad-Schema"}, 1, `schema "Bad-Schema"`},
		{[]string{"rules", "--postgres", dsn, "--canary-fraction", "2"}, 1, "canary fraction 2 is not between 0 and 1"},
		{[]string{"rules", "--postgres", dsn, "--poll-timeout", "2m"}, 1, "gateway TTL 1m30s must exceed the poll timeout 2m0s"},
		{[]string{"rules", "--postgres", dsn}, 1, "no gateway token is configured"},
		{[]string{"rules", "--postgres", dsn, "--trusted-network"}, 1, "postgres connect"},
		{[]string{"rules", "--postgres", dsn, "--trusted-network", "--gateway-retention", "1m"}, 1, "gateway retention 1m0s is shorter than the gateway TTL"},
	})
}

func TestRulesFlagDefaults(t *testing.T) {
	o, err := parseRulesFlags([]string{"--postgres", "postgres://x/y"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	got := []any{o.listen, c.Schema, c.MaxOverride, c.PollTimeout, c.GatewayTTL, c.Canary.Fraction, c.Canary.Window, c.Canary.MinSample,
		c.TrustedNetwork, c.MaxGateways, c.GatewayRetention, c.ReportRate, c.ShadowRawKeys, c.Canary.MinGateways, c.MaxGatewayRate, c.Canary.MaxWait}
	want := []any{"127.0.0.1:8083", "sluice", 7 * 24 * time.Hour, 25 * time.Second, 90 * time.Second, 0.01, 4 * time.Second, int64(200),
		false, 256, time.Hour, 1.0, false, 3, 100_000.0, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("default %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// A gateway that cannot reach the rules service and whose cache file is
// damaged says the cache was unreadable and why, not that there was none.
func TestRulesCacheUnreadableIsSaid(t *testing.T) {
	old := rulesStartTimeout
	rulesStartTimeout = 200 * time.Millisecond
	t.Cleanup(func() { rulesStartTimeout = old })
	cache := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(cache, []byte("{{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := gatewayOptions{RulesURL: "http://127.0.0.1:1", RulesCache: cache, GatewayID: "gw-test"}
	_, _, err := newServiceRules(context.Background(), opts, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "cache file "+cache+" is unreadable: decode:") {
		t.Fatalf("got %v, want an error saying the cache file is unreadable and why", err)
	}
}
