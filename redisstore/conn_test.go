package redisstore_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

func TestParseAddrs(t *testing.T) {
	tests := []struct {
		in         string
		addrs      []string
		user, pass string
		tls        bool
		masterSet  string
	}{
		{in: "127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}},
		{in: " a:1 , b:2 ,", addrs: []string{"a:1", "b:2"}},
		{in: "redis://h", addrs: []string{"h:6379"}},
		{in: "redis://h:7000/0", addrs: []string{"h:7000"}},
		{in: "redis://:s3cret@h:7000", addrs: []string{"h:7000"}, pass: "s3cret"},
		{in: "redis://sluice:s3cret@h:7000/", addrs: []string{"h:7000"}, user: "sluice", pass: "s3cret"},
		{in: "redis://sluice@h:7000", addrs: []string{"h:7000"}, user: "sluice"},
		{in: "redis://u:p%40ss%3Aword@h:1", addrs: []string{"h:1"}, user: "u", pass: "p@ss:word"},
		{in: "rediss://u:p@a:1,rediss://b:2,c:3", addrs: []string{"a:1", "b:2", "c:3"}, user: "u", pass: "p", tls: true},
		{in: "rediss://[::1]:6380", addrs: []string{"[::1]:6380"}, tls: true},
		{in: "redis-sentinel://h/mymaster", addrs: []string{"h:26379"}, masterSet: "mymaster"},
		{in: "redis-sentinel://:pw@a:1/m, b:2", addrs: []string{"a:1", "b:2"}, pass: "pw", masterSet: "m"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			cfg, err := redisstore.ParseAddrs(tt.in)
			if err != nil {
				t.Fatalf("ParseAddrs(%q): %v", tt.in, err)
			}
			if !slices.Equal(cfg.Addrs, tt.addrs) {
				t.Errorf("Addrs = %q, want %q", cfg.Addrs, tt.addrs)
			}
			if cfg.Username != tt.user || cfg.Password != tt.pass {
				t.Errorf("user, password = %q, %q; want %q, %q", cfg.Username, cfg.Password, tt.user, tt.pass)
			}
			if got := cfg.TLS != nil; got != tt.tls {
				t.Errorf("TLS set = %v, want %v", got, tt.tls)
			}
			if cfg.MasterSet != tt.masterSet {
				t.Errorf("MasterSet = %q, want %q", cfg.MasterSet, tt.masterSet)
			}
			if cfg.TLS != nil && cfg.TLS.MinVersion < tls.VersionTLS12 {
				t.Errorf("TLS MinVersion = %x, want at least TLS 1.2", cfg.TLS.MinVersion)
			}
		})
	}
}

func TestParseAddrsErrors(t *testing.T) {
	const secret = "hunter2-secret"
	tests := []struct {
		in   string
		want string // in the error
	}{
		{in: "", want: "no redis address"},
		{in: " , ", want: "no redis address"},
		{in: "localhost", want: `"localhost": want host:port`},
		{in: "http://u:" + secret + "@h:1", want: `scheme "http"`},
		{in: "redis://u:" + secret + "@h:1/3", want: `database "3"`},
		{in: "redis://u:" + secret + "@h:1?db=1", want: "options in the URL"},
		{in: "redis://u:" + secret + "@:1", want: "names no host"},
		{in: "redis://h:1,rediss://u:" + secret + "@h:2", want: "agree on TLS"},
		{in: "redis://u:" + secret + "@h:1,redis://v:other@h:2", want: "other credentials"},
		{in: "redis://u:" + secret + "@h:bad port", want: "not a URL"},
		{in: "redis://u:" + secret + "@@h%zz:1", want: "not a URL"},
		{in: "default:" + secret + "@h:1", want: "needs a redis:// or rediss:// URL"},
		{in: "redis-sentinel://u:" + secret + "@h:1", want: "names the master set"},
		{in: "redis-sentinel://u:" + secret + "@h:1/a/b", want: "names the master set"},
		{in: "redis-sentinel://h:1/a,redis-sentinel://u:" + secret + "@h:2/b", want: "master set \"b\""},
		{in: "redis-sentinel://h:1/a,redis://u:" + secret + "@h:2", want: "agree on TLS and Sentinel"},
		{in: "h:2, " + secret + "@h:1", want: "needs a redis:// or rediss:// URL"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := redisstore.ParseAddrs(tt.in)
			if err == nil {
				t.Fatalf("ParseAddrs(%q) succeeded, want an error", tt.in)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q shows the password", err)
			}
			if strings.Contains(tt.in, secret) && !strings.Contains(err.Error(), "xxxxx") {
				t.Errorf("error %q does not name the address (password masked)", err)
			}
		})
	}
}

func TestTLSFilesErrors(t *testing.T) {
	certs := redistest.NewCerts(t)
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files redisstore.TLSFiles
		want  string
	}{
		{"missing CA", redisstore.TLSFiles{CA: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"CA not PEM", redisstore.TLSFiles{CA: notPEM}, "no PEM certificate"},
		{"cert without key", redisstore.TLSFiles{Cert: certs.ClientCert}, "has no key file"},
		{"key without cert", redisstore.TLSFiles{Key: certs.ClientKey}, "has no certificate file"},
		{"key of another cert", redisstore.TLSFiles{Cert: certs.ClientCert, Key: certs.ServerKey}, "private key does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.files.Config()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Config() error = %v, want one saying %q", err, tt.want)
			}
		})
	}
	cfg, err := redisstore.TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey, ServerName: "redis.internal"}.Config()
	if err != nil {
		t.Fatalf("Config of good files: %v", err)
	}
	if cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "redis.internal" || cfg.InsecureSkipVerify {
		t.Errorf("Config = roots %v, %d certificates, server name %q, skip verify %v; want the CA, one, redis.internal, false",
			cfg.RootCAs != nil, len(cfg.Certificates), cfg.ServerName, cfg.InsecureSkipVerify)
	}
}

// connectOnce opens a store for cfg, logging into a buffer the test can read,
// and proves it works with one Take.
func connectOnce(t *testing.T, cfg redisstore.Config) {
	t.Helper()
	s, err := redisstore.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New(%v): %v", cfg.Addrs, err)
	}
	defer s.Close()
	req := limit.Request{Key: "conn-" + t.Name(), Limits: []limit.Limit{{Name: "s", Count: 5, Period: time.Second}}}
	if d, err := s.Take(t.Context(), &req); err != nil || !d.Allowed {
		t.Fatalf("Take = %+v, %v; want allowed", d, err)
	}
}

// refuse opens a store for cfg and checks that New fails with an error
// naming every address and saying want, and that neither the error nor the
// store's log holds the password.
func refuse(t *testing.T, cfg redisstore.Config, want string) {
	t.Helper()
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := redisstore.New(ctx, cfg)
	if err == nil {
		s.Close()
		t.Fatalf("New(%v) succeeded, want an error saying %q", cfg.Addrs, want)
	}
	msg := err.Error()
	t.Logf("New error: %s", msg)
	if !strings.Contains(msg, want) {
		t.Errorf("New error %q does not say %q", msg, want)
	}
	if !strings.Contains(msg, cfg.Addrs[0]) {
		t.Errorf("New error %q does not name the address %s", msg, cfg.Addrs[0])
	}
	if cfg.Password != "" && (strings.Contains(msg, cfg.Password) || strings.Contains(logs.String(), cfg.Password)) {
		t.Errorf("the password is shown: error %q, log %q", msg, logs.String())
	}
}

func TestCredentials(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := t.Context()
	// The ACL user may touch only sluice's keys and run what sluice runs.
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "sluice", "on", ">acl-pw-31337", "~sl:*", "+@all", "-@dangerous"},
		{"CONFIG", "SET", "requirepass", "default-pw-4242"},
	} {
		if _, err := srv.Do(ctx, cmd...); err != nil {
			t.Fatalf("%v: %v", cmd[:2], err)
		}
	}
	addr := srv.Addr()
	t.Run("requirepass", func(t *testing.T) {
		connectOnce(t, redisstore.Config{Addrs: []string{addr}, Password: "default-pw-4242"})
	})
	t.Run("ACL user", func(t *testing.T) {
		connectOnce(t, redisstore.Config{Addrs: []string{addr}, Username: "sluice", Password: "acl-pw-31337"})
	})
	t.Run("URL", func(t *testing.T) {
		cfg, err := redisstore.ParseAddrs("redis://sluice:acl-pw-31337@" + addr)
		if err != nil {
			t.Fatal(err)
		}
		connectOnce(t, cfg)
	})
	t.Run("wrong password", func(t *testing.T) {
		refuse(t, redisstore.Config{Addrs: []string{addr}, Username: "sluice", Password: "not-the-pw-777"}, "WRONGPASS")
	})
	t.Run("no password", func(t *testing.T) {
		refuse(t, redisstore.Config{Addrs: []string{addr}}, "NOAUTH")
	})
}

func TestTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	mtls := redistest.StandaloneTLS(t, redistest.TLS{Certs: certs, ClientAuth: true})
	addr := mtls.TLSAddr()
	trusted := redisstore.TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}
	tlsConfig := func(t *testing.T, f redisstore.TLSFiles) *tls.Config {
		t.Helper()
		c, err := f.Config()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("mutual TLS", func(t *testing.T) {
		connectOnce(t, redisstore.Config{Addrs: []string{addr}, TLS: tlsConfig(t, trusted)})
	})
	t.Run("server name", func(t *testing.T) {
		f := trusted
		f.ServerName = "localhost"
		connectOnce(t, redisstore.Config{Addrs: []string{addr}, TLS: tlsConfig(t, f)})
	})
	t.Run("wrong server name", func(t *testing.T) {
		f := trusted
		f.ServerName = "redis.example"
		refuse(t, redisstore.Config{Addrs: []string{addr}, TLS: tlsConfig(t, f)}, "certificate is valid for localhost, not redis.example")
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		f := trusted
		f.CA = certs.OtherCA
		refuse(t, redisstore.Config{Addrs: []string{addr}, Password: "pw-never-shown", TLS: tlsConfig(t, f)}, "certificate signed by unknown authority")
	})
	t.Run("no client certificate", func(t *testing.T) {
		// Under TLS 1.3 the server refuses a missing client certificate
		// after the client's side of the handshake is done, so the client
		// sees its first write reset; New reads the alert to say why, and
		// fails: a refused configuration is not an outage.
		refuse(t, redisstore.Config{Addrs: []string{addr}, TLS: tlsConfig(t, redisstore.TLSFiles{CA: certs.CA})}, "certificate required")
	})
	t.Run("server TLS only", func(t *testing.T) {
		srv := redistest.StandaloneTLS(t, redistest.TLS{Certs: certs})
		if _, err := srv.Do(t.Context(), "CONFIG", "SET", "requirepass", "tls-pw-9090"); err != nil {
			t.Fatal(err)
		}
		cfg, err := redisstore.ParseAddrs("rediss://:tls-pw-9090@" + srv.TLSAddr())
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tlsConfig(t, redisstore.TLSFiles{CA: certs.CA})
		connectOnce(t, cfg)
	})
}

// TestClusterTLS runs a 3-primary cluster that speaks only TLS to clients
// and requires an ACL user: the client is seeded with one TLS address, so
// it can only reach the other primaries at the TLS ports the cluster
// announces over TLS.
func TestClusterTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	c := redistest.StartClusterTLS(t, 3, 0, redistest.TLS{Certs: certs, ClientAuth: true})
	for _, n := range c.Nodes() {
		if _, err := n.Do(t.Context(), "ACL", "SETUSER", "sluice", "on", ">cluster-pw-5150", "~sl:*", "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	tc, err := redisstore.TLSFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg := redisstore.Config{Addrs: c.TLSAddrs()[:1], Username: "sluice", Password: "cluster-pw-5150", TLS: tc}
	s, err := redisstore.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	if !s.Cluster() {
		t.Fatal("Cluster() = false over TLS, want true")
	}
	// Keys spread over every primary: each must be reached over TLS.
	tlsAddrs := map[string]bool{}
	for _, a := range c.TLSAddrs() {
		tlsAddrs[a] = true
	}
	seen := map[string]bool{}
	for i := 0; len(seen) < 3 && i < 200; i++ {
		req := limit.Request{Key: "tls-" + strings.Repeat("k", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26)),
			Limits: []limit.Limit{{Name: "s", Count: 5, Period: time.Second}}}
		if _, err := s.Take(t.Context(), &req); err != nil {
			t.Fatalf("Take(%q): %v", req.Key, err)
		}
		slot, err := c.KeySlot(t.Context(), s.RedisKey(req.Key, &req.Limits[0]))
		if err != nil {
			t.Fatal(err)
		}
		node := s.NodeAddr(uint16(slot))
		if !tlsAddrs[node] {
			t.Fatalf("slot %d served at %s, want one of the TLS addresses %v", slot, node, c.TLSAddrs())
		}
		seen[node] = true
	}
	if len(seen) != 3 {
		t.Errorf("keys reached %d primaries over TLS, want 3", len(seen))
	}
	cfg.Password = "wrong-cluster-pw"
	refuse(t, cfg, "WRONGPASS")
}

// ParseAddrs reads what an operator writes in --redis; a password in a URL
// is better kept in a file (see cmd/sluice's --redis-password-file).
func ExampleParseAddrs() {
	cfg, err := redisstore.ParseAddrs("rediss://sluice@10.0.0.1:6379,rediss://sluice@10.0.0.2:6379")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Addrs, cfg.Username, cfg.TLS != nil)
	_, err = redisstore.ParseAddrs("redis://sluice:s3cret@10.0.0.1:6379/5")
	fmt.Println(err)
	// Output:
	// [10.0.0.1:6379 10.0.0.2:6379] sluice true
	// redis address "redis://sluice:xxxxx@10.0.0.1:6379/5": database "5": sluice uses database 0, the only one Redis Cluster has
}

// FuzzParseAddrs checks that ParseAddrs never panics and never puts a URL's
// password in its error, whatever surrounds it.
func FuzzParseAddrs(f *testing.F) {
	for _, s := range []string{"h:1", "redis://u:PW@h:1", "rediss://:PW@[::1]:6380/0", "redis://u:PW@h:1,rediss://h:2",
		"redis://u:PW@h:x", "redis://u:PW@h%zz:1", "redis://u:PW@@h:1?db=2", "http://u:PW@h", " , ", "default:PW@h:1", "redis:x,u:PW@h"} {
		f.Add(s, "s3cr3t-fuzz")
	}
	f.Fuzz(func(t *testing.T, s, pw string) {
		// The password as a URL would carry it: escaped, so that it stays
		// the password and does not end the user info.
		// Only a password in the place of one: after a colon, before an
		// '@', once.
		if len(pw) < 6 || strings.ContainsAny(pw, "%:@/?#,[] ") || strings.Count(s, "PW") != 1 || !strings.Contains(s, ":PW@") ||
			strings.Contains(s, pw) || !isPrintable(s) {
			return
		}
		in := strings.ReplaceAll(s, "PW", pw)
		cfg, err := redisstore.ParseAddrs(in)
		if err != nil {
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("ParseAddrs(%q) error %q shows the password", in, err)
			}
			return
		}
		if len(cfg.Addrs) == 0 {
			t.Fatalf("ParseAddrs(%q) = no addresses and no error", in)
		}
	})
}

// Config names the file at fault.
func ExampleTLSFiles_Config() {
	_, err := redisstore.TLSFiles{CA: "/etc/sluice/tls/redis-ca.crt", Cert: "/etc/sluice/tls/redis-client.crt"}.Config()
	fmt.Println(err)
	// Output: redis TLS authority: open /etc/sluice/tls/redis-ca.crt: no such file or directory
}

// isPrintable reports whether s is printable UTF-8, which errors quote as
// it is: the quoting of other bytes (\xf3...) could spell a password by
// chance.
func isPrintable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}
