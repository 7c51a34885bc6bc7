package process_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/process"
)

// TestReady checks /readyz: 503 naming the nodes down, 200 once none is,
// and one look at the store however many ask within half a second.
func TestReady(t *testing.T) {
	var calls atomic.Int64
	var down atomic.Value
	down.Store([]string{"10.0.0.1:6379"})
	srv := httptest.NewServer(process.Ready(func(context.Context) []string {
		calls.Add(1)
		return down.Load().([]string)
	}))
	defer srv.Close()
	for range 20 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"down":["10.0.0.1:6379"]`) {
			t.Fatalf("a node down: %d %s, want 503 naming it", resp.StatusCode, body)
		}
	}
	if n := calls.Load(); n > 2 {
		t.Errorf("20 quick readiness checks looked at the store %d times, want 1 (2 on a very slow machine)", n)
	}
	down.Store([]string(nil))
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"status":"ready"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node down: %d %s, want 200 ready", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
