package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

func TestRedisFlags(t *testing.T) {
	certs := redistest.NewCerts(t)
	pwFile := writeFile(t, "redis-password", "from-file-pw\n")
	tests := []struct {
		name       string
		args       []string
		env        string // $SLUICE_REDIS_PASSWORD
		addrs      []string
		user, pass string
		tls        bool
		clientCert bool
		flushDelay time.Duration
		rueidis    bool // RueidisTakes
	}{
		{name: "none"},
		{name: "plain", args: []string{"--redis", "a:1,b:2"}, addrs: []string{"a:1", "b:2"}},
		{name: "password file", args: []string{"--redis", "a:1", "--redis-password-file", pwFile}, addrs: []string{"a:1"}, pass: "from-file-pw"},
		{name: "password in environment", args: []string{"--redis", "redis://sluice@a:1", "--redis-tls"}, env: "from-env-pw",
			addrs: []string{"a:1"}, user: "sluice", pass: "from-env-pw", tls: true},
		{name: "username flag", args: []string{"--redis", "a:1", "--redis-username", "sluice", "--redis-password-file", pwFile},
			addrs: []string{"a:1"}, user: "sluice", pass: "from-file-pw"},
		{name: "URL password", args: []string{"--redis", "rediss://u:url-pw@a:1"}, addrs: []string{"a:1"}, user: "u", pass: "url-pw", tls: true},
		{name: "mutual TLS", args: []string{"--redis", "a:1", "--redis-tls-ca", certs.CA, "--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey},
			addrs: []string{"a:1"}, tls: true, clientCert: true},
		{name: "write coalescing", args: []string{"--redis", "a:1", "--redis-flush-delay", "20us"}, addrs: []string{"a:1"}, flushDelay: 20 * time.Microsecond},
		{name: "takes through rueidis", args: []string{"--redis", "a:1", "--redis-take-connections=false"}, addrs: []string{"a:1"}, rueidis: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			f := addRedisFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.Config(func(k string) string {
				if k == envRedisPassword {
					return tt.env
				}
				return ""
			})
			if err != nil {
				t.Fatalf("Config: %v", err)
			}
			if !slices.Equal(cfg.Addrs, tt.addrs) || cfg.Username != tt.user || cfg.Password != tt.pass {
				t.Errorf("got addrs %q, user %q, password %q; want %q, %q, %q", cfg.Addrs, cfg.Username, cfg.Password, tt.addrs, tt.user, tt.pass)
			}
			if got := cfg.TLS != nil; got != tt.tls {
				t.Errorf("TLS = %v, want %v", got, tt.tls)
			}
			if got := cfg.TLS != nil && len(cfg.TLS.Certificates) == 1; got != tt.clientCert {
				t.Errorf("client certificate loaded = %v, want %v", got, tt.clientCert)
			}
			if cfg.FlushDelay != tt.flushDelay {
				t.Errorf("FlushDelay = %v, want %v", cfg.FlushDelay, tt.flushDelay)
			}
			if cfg.RueidisTakes != tt.rueidis {
				t.Errorf("RueidisTakes = %v, want %v", cfg.RueidisTakes, tt.rueidis)
			}
		})
	}
}

func TestRedisFlagErrors(t *testing.T) {
	empty := writeFile(t, "empty-password", "\n")
	tests := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"TLS without Redis", []string{"--redis-tls"}, "", "need --redis"},
		{"password file without Redis", []string{"--redis-password-file", "/x"}, "", "need --redis"},
		{"bad address", []string{"--redis", "localhost"}, "", `--redis: redis address "localhost"`},
		{"two password sources", []string{"--redis", "a:1", "--redis-password-file", empty}, "env-pw-secret", "both set"},
		{"URL and environment passwords", []string{"--redis", "redis://:url-pw-secret@a:1"}, "env-pw-secret", "keep it out of --redis"},
		{"missing password file", []string{"--redis", "a:1", "--redis-password-file", "/nonexistent/pw"}, "", "/nonexistent/pw"},
		{"empty password file", []string{"--redis", "a:1", "--redis-password-file", empty}, "", "first line is empty"},
		{"user conflict", []string{"--redis", "redis://a@h:1", "--redis-username", "b"}, "", `"b" and the user "a"`},
		{"missing CA", []string{"--redis", "a:1", "--redis-tls-ca", "/nonexistent/ca.pem"}, "", "--redis-tls: redis TLS authority"},
		{"key without certificate", []string{"--redis", "a:1", "--redis-tls-key", "/k.pem"}, "", "has no certificate file"},
		{"flush delay without Redis", []string{"--redis-flush-delay", "20us"}, "", "need --redis"},
		{"negative flush delay", []string{"--redis", "a:1", "--redis-flush-delay", "-1ms"}, "", "--redis-flush-delay -1ms: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := addRedisFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			_, err := f.Config(func(string) string { return tt.env })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Config error %v, want one saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows a password", err)
			}
		})
	}
}

// TestGatewayRedisClusterTLS runs the gateway the way deploy/ does: a
// 3-primary Redis Cluster over mutual TLS, an ACL user, the password in a
// file and the seed as a rediss:// URL.
func TestGatewayRedisClusterTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	c := redistest.StartClusterTLS(t, 3, 0, redistest.TLS{Certs: certs, ClientAuth: true})
	const password = "gw-cluster-pw-8086"
	for _, n := range c.Nodes() {
		if _, err := n.Do(t.Context(), "ACL", "SETUSER", "sluice", "on", ">"+password, "~sl:*", "+@all", "-@dangerous"); err != nil {
			t.Fatal(err)
		}
	}
	rules := writeFile(t, "rules.yaml", sharedRules)
	pwFile := writeFile(t, "redis-password", password+"\n")
	// Deadlines for a loaded machine, so that every answer is Redis's and
	// the count is exact.
	tlsArgs := []string{"--redis-tls-ca", certs.CA, "--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey,
		"--redis-down-after", "2s", "--max-queue", "5s"}
	seed := "rediss://sluice@" + c.TLSAddrs()[0]
	args := append([]string{"gateway", "--listen", "127.0.0.1:0", "--rules", rules, "--redis", seed,
		"--redis-password-file", pwFile, "--redis-timeout", "1s"}, tlsArgs...)
	gw := sluice.Start(t, args...)
	// The burst of 12 is shared through Redis: a second gateway, given its
	// password in the environment, sees what the first took.
	env := []string{envRedisPassword + "=" + password}
	gw2 := sluice.StartEnv(t, env, append([]string{"gateway", "--listen", "127.0.0.1:0", "--rules", rules, "--redis", seed, "--redis-timeout", "1s"}, tlsArgs...)...)
	allowed := 0
	for i := range 20 {
		url := []string{gw.URL, gw2.URL}[i%2]
		if resp, _ := get(t, "GET", url+"/", "X-API-Key", "tls-key"); resp.StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 12 {
		t.Errorf("%d of 20 requests allowed across two gateways, want the shared burst of 12", allowed)
	}
	for _, p := range []string{gw.Stderr(), gw2.Stderr()} {
		if !strings.Contains(p, `"tls":true`) || strings.Contains(p, password) {
			t.Errorf("gateway log does not say TLS, or shows the password:\n%s", p)
		}
	}
}

// TestGatewayRedisRefusals checks the start-up errors of a wrong password
// and an untrusted certificate: exit code 1, the address and the cause
// named, the password nowhere.
func TestGatewayRedisRefusals(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.StandaloneTLS(t, redistest.TLS{Certs: certs})
	if _, err := srv.Do(t.Context(), "CONFIG", "SET", "requirepass", "right-pw-2718"); err != nil {
		t.Fatal(err)
	}
	const wrong = "wrong-pw-3141"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"wrong password", []string{"--redis", srv.Addr(), "--redis-password-file", writeFile(t, "pw", wrong)}, "WRONGPASS"},
		{"wrong password in URL", []string{"--redis", "redis://:" + wrong + "@" + srv.Addr()}, "WRONGPASS"},
		{"untrusted certificate", []string{"--redis", "rediss://:" + wrong + "@" + srv.TLSAddr(), "--redis-tls-ca", certs.OtherCA},
			"certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := sluice.Run(t, append([]string{"gateway", "--listen", "127.0.0.1:0"}, tt.args...)...)
			addr := strings.TrimPrefix(tt.args[1], "rediss://:"+wrong+"@")
			addr = strings.TrimPrefix(addr, "redis://:"+wrong+"@")
			if code != 1 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, addr) {
				t.Errorf("exit code %d, stderr %q; want 1 and an error naming %s and saying %q", code, stderr, addr, tt.want)
			}
			if strings.Contains(stdout+stderr, wrong) {
				t.Errorf("the password is shown:\nstdout %s\nstderr %s", stdout, stderr)
			}
		})
	}
}
