package rls

import (
	"cmp"
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Watcher keeps the rules of a configuration file or directory current. It
// polls the files' contents, so edits, new files, removals and the symlink
// swaps of a Kubernetes ConfigMap all count; a change that does not load
// keeps the rules in force and is logged with its reason. It is a
// RuleSource, safe for concurrent use.
type Watcher struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[Rules]

	mu  sync.Mutex        // serializes Reload
	sum [sha256.Size]byte // of the files last read; guarded by mu
}

// Watch loads the rules at path (see LoadRules), logging its warnings, and
// returns a Watcher serving them; an error means they did not load. Call
// Run to follow changes. A nil logger discards.
func Watch(path string, logger *slog.Logger) (*Watcher, error) {
	w := &Watcher{path: path, log: cmp.Or(logger, slog.New(slog.DiscardHandler))}
	if _, err := w.Reload(); err != nil {
		return nil, err
	}
	return w, nil
}

// Current returns the rules in force.
func (w *Watcher) Current() *Rules { return w.cur.Load() }

// Reload reads the files again and, if they changed and load, puts their
// rules in force at once. It reports whether it did; on an error the rules
// in force stay.
func (w *Watcher) Reload() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	files, err := readConfig(w.path)
	if err != nil {
		return false, err
	}
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.name))
		h.Write([]byte{0})
		h.Write(f.data)
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if sum == w.sum && w.cur.Load() != nil {
		return false, nil
	}
	r, warnings, err := compile(files)
	for _, msg := range warnings {
		w.log.Warn("rls config: "+msg, "path", w.path)
	}
	// Bad contents are remembered too, so their error is logged once, not
	// on every poll.
	w.sum = sum
	if err != nil {
		return false, err
	}
	w.cur.Store(r)
	w.log.Info("rls config loaded", "path", w.path, "domains", r.Domains())
	return true, nil
}

// Run reloads every interval (zero means one second) until ctx is done,
// logging each error of a change that does not load once.
func (w *Watcher) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(cmp.Or(max(every, 0), time.Second))
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		msg := ""
		if _, err := w.Reload(); err != nil {
			if msg = err.Error(); msg != last {
				w.log.Error("rls config not reloaded; keeping the rules in force", "path", w.path, "error", err)
			}
		}
		last = msg
	}
}
