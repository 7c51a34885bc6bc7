package process_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/process"
)

func TestSlowBodyTimesOut(t *testing.T) {
	// A client that sends its headers and then trickles, or stalls, its
	// body loses the connection at the server's ReadTimeout.
	bodyErr := make(chan error, 1)
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = process.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		bodyErr <- err
	}), nil)
	if srv.Config.ReadTimeout != process.DefaultReadTimeout {
		t.Errorf("ReadTimeout %v, want DefaultReadTimeout %v", srv.Config.ReadTimeout, process.DefaultReadTimeout)
	}
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nstart of the body")
	select {
	case err := <-bodyErr:
		if err == nil {
			t.Error("reading a stalled body: got no error, want a timeout")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stalled body was still being read 5s after a 200ms ReadTimeout")
	}
}

func TestServeFinishesRequestsInFlight(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- process.Run(ctx, 10*time.Second, nil, process.Endpoint{Server: process.NewServer(h, nil), Listener: ln})
	}()

	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-entered
	cancel()
	// New connections are refused once shutdown has begun.
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if r := <-got; r.err != nil || r.body != "done" {
		t.Errorf("request in flight during shutdown: %q, %v; want done", r.body, r.err)
	}
	if err := <-served; err != nil {
		t.Errorf("Run: %v, want nil after a clean shutdown", err)
	}
}

// stuck is a Server whose work never drains.
type stuck struct {
	closed chan struct{}
}

func (s stuck) Serve(net.Listener) error           { <-s.closed; return nil }
func (s stuck) Shutdown(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (s stuck) Close() error                       { close(s.closed); return nil }

// failing is a Server that cannot serve.
type failing struct{ shut chan struct{} }

func (f failing) Serve(net.Listener) error       { return errors.New("no such device") }
func (f failing) Shutdown(context.Context) error { close(f.shut); return nil }
func (f failing) Close() error                   { return nil }

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestRun(t *testing.T) {
	for _, c := range []struct {
		name    string
		servers func() []process.Server
		stop    bool   // cancel the context
		wantErr string // "" for a clean drain
	}{
		{"clean drain of two servers", func() []process.Server {
			return []process.Server{process.NewServer(http.NotFoundHandler(), nil), process.NewServer(http.NotFoundHandler(), nil)}
		}, true, ""},
		{"drain past the timeout", func() []process.Server {
			return []process.Server{process.NewServer(http.NotFoundHandler(), nil), stuck{make(chan struct{})}}
		}, true, "within 50ms: context deadline exceeded"},
		{"one server fails: the other stops too", func() []process.Server {
			return []process.Server{process.NewServer(http.NotFoundHandler(), nil), failing{make(chan struct{})}}
		}, false, "no such device"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&log, nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var eps []process.Endpoint
			for _, s := range c.servers() {
				eps = append(eps, process.Endpoint{Server: s, Listener: listen(t)})
			}
			if c.stop {
				cancel()
			}
			err := process.Run(ctx, 50*time.Millisecond, logger, eps...)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("Run: %v, want nil", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("Run: %v, want an error containing %q", err, c.wantErr)
			}
			for _, ep := range eps {
				if c, err := net.Dial("tcp", ep.Listener.Addr().String()); err == nil {
					c.Close()
					t.Errorf("%s still accepts after Run returned", ep.Listener.Addr())
				}
			}
			var rec struct {
				Msg       string
				Addr      string
				TimeoutMS int64 `json:"timeout_ms"`
			}
			if err := json.Unmarshal(log.Bytes(), &rec); err != nil || !strings.HasPrefix(rec.Msg, "draining") || rec.TimeoutMS != 50 ||
				strings.Count(rec.Addr, ",") != len(eps)-1 {
				t.Errorf("log %q: want one draining line with every address and timeout_ms 50", log.String())
			}
		})
	}
}
