package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/rules"
)

// rulesFileEvery is how often a --rules file is checked for changes.
const rulesFileEvery = time.Second

// fileRules is a gateway.RuleSource that follows a rules file: it reloads
// the file on SIGHUP and when its contents change (checked every
// rulesFileEvery by hash, so edits, renames over it and the symlink swaps
// of a Kubernetes ConfigMap all count). A file that does not load keeps
// the rules in force and logs why. Its methods are safe for concurrent
// use.
type fileRules struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[rules.Set]

	mu  sync.Mutex        // serializes reload
	sum [sha256.Size]byte // of the contents last read, loaded or not; guarded by mu

	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
}

// newFileRules loads path, which must be valid: the gateway does not start
// on a bad rules file.
func newFileRules(path string, logger *slog.Logger) (*fileRules, error) {
	f := &fileRules{path: path, log: logger,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rules_reload_total",
			Help: "Reloads of the --rules file after SIGHUP or a change, by result: ok, invalid (the old rules stay) or unchanged."},
			[]string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_rules_reload_last_success_timestamp_seconds",
			Help: "Unix time the --rules file last loaded, at start or on a reload."}),
	}
	for _, r := range []string{"ok", "invalid", "unchanged"} {
		f.reloads.WithLabelValues(r)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	set, err := rules.Parse(path, b)
	if err != nil {
		return nil, err
	}
	f.sum = sha256.Sum256(b)
	f.cur.Store(set)
	f.lastSuccess.SetToCurrentTime()
	return f, nil
}

// Current returns the rules in force.
func (f *fileRules) Current() *rules.Set { return f.cur.Load() }

// Register registers the reload metrics on reg.
func (f *fileRules) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{f.reloads, f.lastSuccess} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register rules file metrics: %w", err)
		}
	}
	return nil
}

// reload reads the file and, when force is set or its contents changed,
// puts its rules in force if they load. It logs and counts the result.
func (f *fileRules) reload(force bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	var set *rules.Set
	if err == nil {
		sum := sha256.Sum256(b)
		if sum == f.sum && !force {
			return
		}
		f.sum = sum // a bad file is reported once, not on every poll
		set, err = rules.Parse(f.path, b)
	}
	if err != nil {
		f.reloads.WithLabelValues("invalid").Inc()
		f.log.Error("rules file not reloaded; keeping the rules in force", "file", f.path, "err", err,
			"hash", f.cur.Load().Hash)
		return
	}
	f.lastSuccess.SetToCurrentTime()
	if f.cur.Load().Hash == set.Hash {
		f.reloads.WithLabelValues("unchanged").Inc()
		f.log.Info("rules file reloaded; the rules are unchanged", "file", f.path, "hash", set.Hash)
		return
	}
	f.cur.Store(set)
	f.reloads.WithLabelValues("ok").Inc()
	f.log.Info("rules file reloaded", "file", f.path, "hash", set.Hash, "rules", len(set.Document().Rules))
}

// run reloads on each hangup, and when the file's contents change, until
// ctx is done.
func (f *fileRules) run(ctx context.Context, hangup <-chan struct{}) {
	t := time.NewTicker(rulesFileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hangup:
			f.log.Info("SIGHUP: reloading the rules file", "file", f.path)
			f.reload(true)
		case <-t.C:
			f.reload(false)
		}
	}
}
