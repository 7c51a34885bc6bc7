package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds how long a redis-server may take to answer its first
// PING. It starts in milliseconds; the margin is for loaded CI machines.
const startTimeout = 20 * time.Second

// Server is one redis-server process on a loopback port. Its methods are
// safe for concurrent use. The process belongs to whoever started it: the
// test's Cleanup, the stop function of NewStandalone, or the Cluster.
type Server struct {
	addr string
	port int
	dir  string   // the server's working directory: log, nodes.conf
	args []string // command line after the binary, reused by Restart

	mu   sync.Mutex
	proc *os.Process   // guarded by mu; nil once killed
	done chan struct{} // guarded by mu; closed when proc has exited
	stop bool          // guarded by mu; the process is SIGSTOPped
}

// Standalone starts a standalone redis-server for the test and kills it when
// the test ends. It fails the test if the server does not start.
func Standalone(t TB) *Server {
	t.Helper()
	s, stop, err := NewStandalone()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(stop)
	return s
}

// StandaloneWith is Standalone with extra redis-server arguments after the
// test defaults, for example "--enable-debug-command", "yes" to let a test
// pause the server with DEBUG SLEEP.
func StandaloneWith(t TB, args ...string) *Server {
	t.Helper()
	return startFor(t, func(dir string) (*Server, error) { return startOnFreePort(dir, false, args) })
}

// NewStandalone starts a standalone redis-server without a testing.TB, for
// TestMain. The caller must call stop, which kills the server and removes
// its directory.
func NewStandalone() (s *Server, stop func(), err error) {
	return startTemp(func(dir string) (*Server, error) { return startOnFreePort(dir, false, nil) })
}

// startTemp starts a server with start in a new temporary directory; stop
// kills it and removes the directory.
func startTemp(start func(dir string) (*Server, error)) (s *Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, nil, fmt.Errorf("make server directory: %w", err)
	}
	if s, err = start(dir); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() { s.Kill(); os.RemoveAll(dir) }, nil
}

// startFor is startTemp for a test: it fails the test if the server does
// not start, and stops it when the test ends.
func startFor(t TB, start func(dir string) (*Server, error)) *Server {
	t.Helper()
	s, stop, err := startTemp(start)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(stop)
	return s
}

// retry calls f every interval until it returns nil, and returns nil; or
// until ctx is done, and returns ctx's error with f's last.
func retry(ctx context.Context, every time.Duration, f func() error) error {
	for {
		last := f()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(every):
		}
	}
}

// startOnFreePort starts a server in dir, retrying on another port when the
// chosen one was taken between the check and redis-server's bind (other
// test binaries run alongside and pick ports too).
func startOnFreePort(dir string, cluster bool, extra []string) (*Server, error) {
	return onFreePort(8, cluster, func(port int) (*Server, error) {
		s := newServer(dir, port, cluster, extra)
		err := s.start()
		if errors.Is(err, errPortTaken) {
			// A node that could not bind must not hand its half-made
			// identity to the next attempt.
			os.Remove(filepath.Join(dir, "nodes.conf"))
		}
		return s, err
	})
}

// onFreePort calls start with a free port (see freePort), and again with
// another, tries times in all, while start finds its port taken.
func onFreePort(tries int, cluster bool, start func(port int) (*Server, error)) (*Server, error) {
	var last error
	for range tries {
		port, err := freePort(cluster)
		if err != nil {
			return nil, err
		}
		s, err := start(port)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
		last = err
	}
	return nil, last
}

// freePort returns a loopback port that is free now and, for a cluster node,
// whose bus port (port+10000) is free too. Ports come from 10000-22767, so
// that both stay below Linux's ephemeral range (32768 and up), where
// outgoing connections would otherwise take them at random.
func freePort(cluster bool) (int, error) {
	for range 100 {
		port := 10000 + rand.IntN(12768)
		if !portFree(port) || cluster && !portFree(port+10000) {
			continue
		}
		return port, nil
	}
	return 0, errors.New("no free loopback port pair found in 100 tries")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func newServer(dir string, port int, cluster bool, extra []string) *Server {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
		// No persistence: the tests need none, and a fork for a snapshot
		// would stall the server at random moments.
		"--save", "",
		"--appendonly", "no",
	}
	if cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "1000",
			"--repl-diskless-sync-delay", "0",
			"--cluster-require-full-coverage", "no",
			// A replica whose link broke a while ago may still take over:
			// tests that kill a primary want a failover, not a stuck shard.
			"--cluster-replica-validity-factor", "0",
		)
	}
	args = append(args, extra...)
	return &Server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir, args: args}
}

// errPortTaken reports that redis-server could not bind its port.
var errPortTaken = errors.New("port taken")

// start runs the process and waits until it answers PING.
func (s *Server) start() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("make server directory: %w", err)
	}
	// An empty log per start, so that the port check below reads only this
	// attempt's lines.
	os.Remove(filepath.Join(s.dir, "redis.log"))
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server (is it installed? scripts/test installs it): %w", err)
	}
	done := make(chan struct{})
	// The waiter ends when the process does; Kill and the cleanups make sure
	// it does.
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.proc, s.done, s.stop = cmd.Process, done, false
	s.mu.Unlock()

	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		v, err := do(ctx, s.addr, "PING")
		cancel()
		if err == nil && v == "PONG" {
			return nil
		}
		select {
		case <-done:
			s.mu.Lock()
			s.proc = nil
			s.mu.Unlock()
			log := s.logTail()
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("redis-server on %s: %w", s.addr, errPortTaken)
			}
			return fmt.Errorf("redis-server on %s exited at start; log:\n%s", s.addr, log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer PING within %v (last error %v); log:\n%s", s.addr, startTimeout, err, s.logTail())
		}
	}
}

// logTail returns the last lines of the server's log, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// Do sends one command to this server on a fresh connection and returns its
// reply: a string, an int64, nil, or a []any of those; an error reply comes
// back as a ReplyError. A context without a deadline gets 5 seconds.
func (s *Server) Do(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redistest: Do needs a command")
	}
	return do(ctx, s.addr, args...)
}

// DoMulti sends commands to this server, in order, on one fresh connection,
// and returns their replies, an error reply as a ReplyError among them. One
// connection matters for commands about the connection's own writes, such
// as WAIT after a SET.
func (s *Server) DoMulti(ctx context.Context, cmds ...[]string) ([]any, error) {
	for _, c := range cmds {
		if len(c) == 0 {
			return nil, errors.New("redistest: DoMulti needs a command in every slot")
		}
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	return doMulti(ctx, s.addr, cmds...)
}

// Kill kills the process with SIGKILL, as a crash would, and waits for it
// to exit. Killing a dead server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	p, done := s.proc, s.done
	s.proc, s.stop = nil, false
	s.mu.Unlock()
	if p == nil {
		return
	}
	p.Kill() // works on a stopped process too
	<-done
}

// Stop freezes the process with SIGSTOP: its port still accepts connections
// but nothing answers, like a server stuck or cut off by the network.
func (s *Server) Stop() error { return s.signal(syscall.SIGSTOP, true) }

// Cont resumes a process frozen by Stop.
func (s *Server) Cont() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, stopped bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("redistest: %s: server on %s is not running", sig, s.addr)
	}
	if err := s.proc.Signal(sig); err != nil {
		return fmt.Errorf("redistest: %s to server on %s: %w", sig, s.addr, err)
	}
	s.stop = stopped
	return nil
}

// Running reports whether the process is alive and not stopped.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.stop
}

// Restart starts a killed server again on the same port and directory; a
// cluster node comes back with its nodes.conf and rejoins as it would after
// a crash. Restarting a running server is an error.
func (s *Server) Restart() error {
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		return fmt.Errorf("redistest: restart: server on %s is running", s.addr)
	}
	if err := s.start(); err != nil {
		return fmt.Errorf("redistest: restart: %w", err)
	}
	return nil
}
