package process

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// readyTimeout bounds one readiness check's look at the shared store, and
// readyFor is how long its answer is reused: /readyz may be on the API's
// public address, and a client asking it in a loop must not turn each of
// its requests into a PING of every Redis node.
const (
	readyTimeout = time.Second
	readyFor     = 500 * time.Millisecond
)

// Ready returns a handler for readiness checks (/readyz): 200
// {"status":"ready"} while down reports nothing, else 503
// {"status":"degraded","down":[...]} naming what down reports, the shared
// store's nodes that do not answer (pipeline.Pipeline.Down). A degraded
// gateway or rls still serves, from its local limits (fail-closed limits
// refuse); this tells a load balancer or an operator so. /healthz stays
// the liveness check. down is called with a context bounded by a second,
// at most once per half second whoever asks (callers meanwhile share its
// answer); nil down is always ready.
func Ready(down func(ctx context.Context) []string) http.Handler {
	rd := &readiness{down: down}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Status string   `json:"status"`
			Down   []string `json:"down,omitempty"`
		}
		body.Status = "ready"
		status := http.StatusOK
		if down != nil {
			body.Down = rd.check(r.Context())
		}
		if len(body.Down) > 0 {
			body.Status, status = "degraded", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(body)
	})
}

// readiness is Ready's last answer, reused for readyFor.
type readiness struct {
	down func(ctx context.Context) []string
	mu   sync.Mutex // held during a check, so that callers share it
	at   time.Time  // when last was read; guarded by mu
	last []string   // guarded by mu
}

// check returns the nodes down, as read less than readyFor ago or now. A
// caller that goes away does not cut the check short for the others.
func (rd *readiness) check(ctx context.Context) []string {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.at.IsZero() && time.Since(rd.at) < readyFor {
		return rd.last
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	rd.last, rd.at = rd.down(cctx), time.Now()
	return rd.last
}
