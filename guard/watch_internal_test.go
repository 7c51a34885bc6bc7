package guard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// panicking is a remote whose every call panics.
type panicking struct{}

func (panicking) Take(context.Context, *limit.Request) (limit.Decision, error) {
	panic("remote store failed")
}

// TestWatcherLifecycle: the watcher starts with the first call, stops on
// its own once no call has been in flight for idleAfter, starts again with
// the next call, and Close stops it for good: later calls run unwatched
// and still get the remote's answer.
func TestWatcherLifecycle(t *testing.T) {
	s, err := New(memstore.New(memstore.Config{}), Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := &limit.Request{Key: "k:a", Limits: []limit.Limit{{Name: "s", Count: 100, Period: time.Second}}}
	take := func() {
		t.Helper()
		if d, err := s.Take(context.Background(), req); err != nil || d.Source != limit.FromMemory {
			t.Fatalf("got %+v, %v; want the remote's answer", d, err)
		}
	}
	if s.watching.Load() {
		t.Fatal("a watcher runs before any call")
	}
	take()
	if !s.watching.Load() {
		t.Fatal("no watcher after a call")
	}
	for deadline := time.Now().Add(10 * idleAfter); s.watching.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watcher still runs %v after the last call", 10*idleAfter)
		}
	}
	take()
	if !s.watching.Load() {
		t.Fatal("no watcher after a call that followed an idle spell")
	}
	s.Close()
	s.Close()
	if s.watching.Load() {
		t.Error("a watcher runs after Close")
	}
	take()
	if s.watching.Load() {
		t.Error("a call after Close started a watcher")
	}
}

// TestPanicUnlistsTheCall: a remote that panics leaves no call listed on
// its shard, where the watcher would look at it forever.
func TestPanicUnlistsTheCall(t *testing.T) {
	s, err := New(panicking{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := &limit.Request{Key: "k:a", Limits: []limit.Limit{{Name: "s", Count: 100, Period: time.Second}}}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the remote's panic was swallowed")
			}
		}()
		s.Take(context.Background(), req)
	}()
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.head != nil || sh.tail != nil {
		t.Error("a call is still listed after its remote panicked")
	}
}

// TestWatcherUnderLoad runs calls from many goroutines while the watcher
// looks at them every poll and ends some (a timeout of a microsecond on a
// store that cannot watch its wire): calls taken off the list and reused
// meanwhile must not race with the watcher (run with -race), and every
// call gets an answer.
func TestWatcherUnderLoad(t *testing.T) {
	s, err := New(memstore.New(memstore.Config{}), Config{Timeout: time.Microsecond, TripAfter: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := range 2000 {
				req := &limit.Request{Key: fmt.Sprintf("k:%d-%d", g, i%50), Limits: []limit.Limit{{Name: "s", Count: 1 << 20, Period: time.Second}}}
				if _, err := s.Take(ctx, req); err != nil {
					t.Errorf("call %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
