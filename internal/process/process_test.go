package process_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/process"
)

func TestInflightWait(t *testing.T) {
	var f process.Inflight
	if n := f.Wait(time.Hour); n != 0 {
		t.Fatalf("nothing served yet: %d in flight, want 0", n)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	h := f.Track(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	<-entered
	if n := f.Wait(20 * time.Millisecond); n != 1 {
		t.Errorf("a request still running: Wait says %d in flight, want 1", n)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		close(release)
	}()
	if n := f.Wait(10 * time.Second); n != 0 {
		t.Errorf("the request ended during the wait: %d in flight, want 0", n)
	}
	<-done
}

func TestHangups(t *testing.T) {
	// Without Signals' context nothing is ever received.
	select {
	case <-process.Hangups(context.Background()):
		t.Fatal("a context not from Signals received a hangup")
	default:
	}
	ctx, stop := process.Signals(context.Background())
	defer stop()
	a, b := process.Hangups(ctx), process.Hangups(ctx)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for i, c := range []<-chan struct{}{a, b} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("subscriber %d: no hangup 10s after SIGHUP", i)
		}
	}
	if ctx.Err() != nil {
		t.Error("SIGHUP ended the context; want only SIGINT and SIGTERM to")
	}
}

func TestMetricsPprof(t *testing.T) {
	for _, c := range []struct {
		pprof bool
		want  int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		srv := httptest.NewServer(process.Metrics(prometheus.NewRegistry(), nil, c.pprof))
		for path, want := range map[string]int{"/metrics": http.StatusOK, "/debug/pprof/": c.want, "/debug/pprof/cmdline": c.want} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("pprof %v: GET %s: got %d, want %d", c.pprof, path, resp.StatusCode, want)
			}
		}
		srv.Close()
	}
}

func TestGo(t *testing.T) {
	started, ended := make(chan struct{}), false
	stop := process.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		ended = true
	})
	<-started
	stop()
	if !ended {
		t.Error("stop returned before f did")
	}
}
