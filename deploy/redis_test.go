package deploy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
)

// exampleRedis is a redis-server running deploy/example/redis/redis.conf
// and users.acl as they are, but for the file paths, the ports and the
// passwords, which the test fills in.
type exampleRedis struct {
	addr      string // the TLS port, the only one
	certs     redistest.Certs
	passwords map[string]string // of each ACL user
	cmd       *exec.Cmd
}

// startExampleRedis starts the example node on free loopback ports, gives
// it every slot (a one-node cluster), and kills it when the test ends.
func startExampleRedis(t *testing.T) *exampleRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed: scripts/test installs it: %v", err)
	}
	dir := t.TempDir()
	r := &exampleRedis{certs: redistest.NewCerts(t), passwords: map[string]string{}}
	acl := regexp.MustCompile(`(?m)^user (\S+) on #0{64}`).ReplaceAllStringFunc(readFile(t, "example/redis/users.acl"), func(line string) string {
		user := strings.Fields(line)[1]
		pw := "test-" + user + "-pw-" + strconv.Itoa(os.Getpid())
		r.passwords[user] = pw
		sum := sha256.Sum256([]byte(pw))
		return "user " + user + " on #" + hex.EncodeToString(sum[:])
	})
	for _, u := range []string{"sluice", "replica", "admin"} {
		if r.passwords[u] == "" {
			t.Fatalf("example/redis/users.acl has no user %s with a #<sha256> password", u)
		}
	}
	conf := strings.NewReplacer(
		"/etc/redis/tls/redis.crt", r.certs.ServerCert,
		"/etc/redis/tls/redis.key", r.certs.ServerKey,
		"/etc/redis/tls/ca.crt", r.certs.CA,
		"/etc/redis/users.acl", filepath.Join(dir, "users.acl"),
		"/etc/redis/replica-auth.conf", filepath.Join(dir, "replica-auth.conf"),
	).Replace(readFile(t, "example/redis/redis.conf"))
	for name, content := range map[string]string{
		"users.acl":         acl,
		"replica-auth.conf": "masterauth " + r.passwords["replica"] + "\n",
		"redis.conf":        conf,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port, bus := freePort(t), freePort(t)
	r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.cmd = exec.Command("redis-server", filepath.Join(dir, "redis.conf"),
		"--tls-port", strconv.Itoa(port), "--cluster-port", strconv.Itoa(bus), "--bind", "127.0.0.1",
		// A node that never met another announces no address of its own
		// (CLUSTER SLOTS answers "" for "the host you asked"); nodes of a
		// real cluster learn theirs from each other.
		"--cluster-announce-ip", "127.0.0.1",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no")
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := r.cli("admin", "PING")
		if err == nil && strings.TrimSpace(out) == "PONG" {
			break
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("redis-server with the example configuration exited:\n%s", log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server with the example configuration did not answer PING: %v %s", err, out)
		}
	}
	if out, err := r.cli("admin", "CLUSTER", "ADDSLOTSRANGE", "0", strconv.Itoa(redistest.Slots-1)); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v %s", err, out)
	}
	for {
		out, _ := r.cli("admin", "CLUSTER", "INFO")
		if strings.Contains(out, "cluster_state:ok") {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the example node did not reach cluster_state:ok:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cli runs redis-cli against the node over mutual TLS as user (no user: no
// login) and returns its output.
func (r *exampleRedis) cli(user string, args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(r.addr)
	a := []string{"-h", host, "-p", port, "--tls", "--cacert", r.certs.CA, "--cert", r.certs.ClientCert, "--key", r.certs.ClientKey}
	if user != "" {
		a = append(a, "--user", user, "--pass", r.passwords[user], "--no-auth-warning")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append(a, args...)...).CombinedOutput()
	return string(out), err
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestExampleRedisConfig runs the example Redis configuration: it starts,
// speaks only TLS, lets the sluice user do what the store does and no
// more, and lets nobody in without a password.
func TestExampleRedisConfig(t *testing.T) {
	t.Parallel()
	r := startExampleRedis(t)
	cfg, err := redisstore.ParseAddrs("rediss://sluice@" + r.addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = r.passwords["sluice"]
	if cfg.TLS, err = (redisstore.TLSFiles{CA: r.certs.CA, Cert: r.certs.ClientCert, Key: r.certs.ClientKey}).Config(); err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("the store as the example's sluice user: %v", err)
	}
	defer s.Close()
	if !s.Cluster() {
		t.Error("the example node is not a cluster node")
	}
	req := limit.Request{Key: "deploy", Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Hour}}}
	for i, want := range []bool{true, false} {
		d, err := s.Take(t.Context(), &req)
		if err != nil || d.Allowed != want {
			t.Fatalf("take %d: %+v, %v; want allowed %v", i+1, d, err, want)
		}
	}
	for _, c := range []struct {
		user string
		args []string
		want string
	}{
		{"sluice", []string{"FLUSHALL"}, "NOPERM"},
		{"sluice", []string{"SET", "other:key", "x"}, "NOPERM"},
		{"sluice", []string{"CONFIG", "GET", "requirepass"}, "NOPERM"},
		{"", []string{"GET", "sl:x"}, "NOAUTH"},
	} {
		out, _ := r.cli(c.user, c.args...)
		if !strings.Contains(out, c.want) {
			t.Errorf("%s as %q: %q, want %s", c.args, c.user, strings.TrimSpace(out), c.want)
		}
	}
	if out, err := r.cli("admin", "DBSIZE"); err != nil || strings.TrimSpace(out) == "0" {
		t.Errorf("DBSIZE as admin: %q, %v; want the store's keys", out, err)
	}
}
