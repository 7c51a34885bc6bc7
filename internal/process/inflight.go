package process

import (
	"net/http"
	"sync"
	"time"
)

// Inflight counts the requests its handlers are serving, so that a command
// shutting down can wait for them before it closes what they use (a store,
// a client). The zero value is ready; it is safe for concurrent use.
type Inflight struct {
	mu   sync.Mutex
	n    int           // requests in flight; guarded by mu
	idle chan struct{} // closed when n drops to 0; guarded by mu
}

// Track returns h counted in f.
func (f *Inflight) Track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		if f.n == 0 {
			f.idle = make(chan struct{})
		}
		f.n++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.n--; f.n == 0 {
				close(f.idle)
			}
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// Wait waits up to d for no request to be in flight, and returns how many
// still are.
func (f *Inflight) Wait(d time.Duration) int {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-time.After(d):
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
