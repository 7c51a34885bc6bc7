package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MasterSet is the name a Sentinels deployment watches its primary under.
const MasterSet = "sluice"

// Sentinels is a Redis primary, its replicas and the Redis Sentinels that
// watch it and fail it over, every process on a loopback port. It belongs
// to the test that started it: StartSentinels kills every process when the
// test ends.
type Sentinels struct {
	// Primary is the primary at the start; after a failover it may be
	// dead, or a replica.
	Primary *Server
	// Replicas replicate Primary at the start.
	Replicas []*Server
	// Watchers are the Sentinel processes.
	Watchers []*Server
}

// StartSentinels starts a primary with replicas replicas and watchers
// Sentinels watching it under MasterSet, with a quorum of a majority of
// them, and waits until every Sentinel knows every replica and every other
// Sentinel, so that killing the primary then fails it over. A Sentinel
// judges the primary down after 1 s of silence.
func StartSentinels(t TB, replicas, watchers int) *Sentinels {
	t.Helper()
	if replicas < 1 || watchers < 1 {
		t.Fatalf("redistest: %d replicas and %d Sentinels: want at least one of each", replicas, watchers)
	}
	dir := t.TempDir()
	d := &Sentinels{}
	t.Cleanup(d.kill)
	p, err := startOnFreePort(filepath.Join(dir, "primary"), false, nil)
	if err != nil {
		t.Fatalf("redistest: primary: %v", err)
	}
	d.Primary = p
	host, port := "127.0.0.1", strconv.Itoa(p.port)
	for i := range replicas {
		r, err := startOnFreePort(filepath.Join(dir, fmt.Sprint("replica", i)), false, []string{"--replicaof", host, port})
		if err != nil {
			t.Fatalf("redistest: replica %d: %v", i, err)
		}
		d.Replicas = append(d.Replicas, r)
	}
	for i := range watchers {
		w, err := startSentinel(filepath.Join(dir, fmt.Sprint("sentinel", i)), p.addr, watchers/2+1)
		if err != nil {
			t.Fatalf("redistest: Sentinel %d: %v", i, err)
		}
		d.Watchers = append(d.Watchers, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.waitKnown(ctx, replicas, watchers-1); err != nil {
		t.Fatalf("redistest: Sentinels not ready: %v", err)
	}
	return d
}

// Addrs returns the Sentinels' addresses.
func (d *Sentinels) Addrs() []string {
	var a []string
	for _, w := range d.Watchers {
		a = append(a, w.addr)
	}
	return a
}

// PrimaryAddr asks the Sentinels which address the primary has now, and
// returns the one a majority of those that answer give.
func (d *Sentinels) PrimaryAddr(ctx context.Context) (string, error) {
	votes := map[string]int{}
	var last error
	for _, w := range d.Watchers {
		v, err := w.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterSet)
		a, ok := v.([]any)
		if err != nil || !ok || len(a) != 2 {
			last = fmt.Errorf("Sentinel %s: %v (reply %v)", w.addr, err, v)
			continue
		}
		votes[fmt.Sprint(a[0])+":"+fmt.Sprint(a[1])]++
	}
	for addr, n := range votes {
		if 2*n > len(d.Watchers) {
			return addr, nil
		}
	}
	return "", fmt.Errorf("no majority of Sentinels names one primary (%v; last error %v)", votes, last)
}

// WaitPrimary waits until a majority of the Sentinels name a primary other
// than old and that server answers as a primary, and returns its address.
func (d *Sentinels) WaitPrimary(ctx context.Context, old string) (string, error) {
	var addr string
	err := retry(ctx, 50*time.Millisecond, func() error {
		var err error
		if addr, err = d.PrimaryAddr(ctx); err != nil {
			return err
		}
		if addr == old {
			return fmt.Errorf("the Sentinels still name %s", old)
		}
		role, err := do(ctx, addr, "ROLE")
		if a, ok := role.([]any); err == nil && (!ok || len(a) == 0 || a[0] != "master") {
			err = fmt.Errorf("%s answers ROLE %v", addr, role)
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("no new primary in place of %s: %w", old, err)
	}
	return addr, nil
}

// waitKnown waits until every Sentinel knows the primary's replicas and
// others other Sentinels.
func (d *Sentinels) waitKnown(ctx context.Context, replicas, others int) error {
	return retry(ctx, 100*time.Millisecond, func() error {
		for _, w := range d.Watchers {
			v, err := w.Do(ctx, "SENTINEL", "MASTER", MasterSet)
			f, _ := v.([]any)
			fields := map[string]string{}
			for i := 0; i+1 < len(f); i += 2 {
				fields[fmt.Sprint(f[i])] = fmt.Sprint(f[i+1])
			}
			if err != nil || fields["num-slaves"] != strconv.Itoa(replicas) || fields["num-other-sentinels"] != strconv.Itoa(others) {
				return fmt.Errorf("Sentinel %s knows %s replicas and %s other Sentinels, want %d and %d (error %v)",
					w.addr, fields["num-slaves"], fields["num-other-sentinels"], replicas, others, err)
			}
		}
		return nil
	})
}

// startSentinel starts a Sentinel in dir watching the primary at primary
// with the given quorum, on a free port. A Sentinel rewrites its
// configuration file, so it gets one of its own.
func startSentinel(dir, primary string, quorum int) (*Server, error) {
	host, port, _ := strings.Cut(primary, ":")
	return onFreePort(8, false, func(p int) (*Server, error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("make Sentinel directory: %w", err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s %[4]d\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 5000\n"+
			"sentinel parallel-syncs %[1]s 1\n", MasterSet, host, port, quorum)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("write Sentinel configuration: %w", err)
		}
		s := &Server{addr: "127.0.0.1:" + strconv.Itoa(p), port: p, dir: dir, args: []string{conf, "--sentinel",
			"--port", strconv.Itoa(p), "--bind", "127.0.0.1", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no"}}
		return s, s.start()
	})
}

// kill kills every process of the deployment.
func (d *Sentinels) kill() {
	for _, s := range append(append([]*Server{d.Primary}, d.Replicas...), d.Watchers...) {
		if s != nil {
			s.Kill()
		}
	}
}
