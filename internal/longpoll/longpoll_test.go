package longpoll_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/longpoll"
)

func TestDoSuccessRule(t *testing.T) {
	for _, c := range []struct {
		status  int
		body    string
		ok      bool
		wantErr string
	}{
		{http.StatusOK, `{"version":1}`, true, ""},
		{http.StatusNoContent, "", true, ""},
		{http.StatusNotModified, "", true, ""},
		{http.StatusNotFound, "no such path", false, "404 Not Found"},
		{http.StatusServiceUnavailable, `{"error":"standby balancer"}`, false, "503 Service Unavailable: standby balancer"},
		{http.StatusUnauthorized, `{"error":"missing token"}`, false, "401 Unauthorized: missing token"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Authorization"); got != "Bearer s3cret" {
				t.Errorf("Authorization %q, want the bearer token", got)
			}
			w.Header().Set("X-Seen", "1")
			w.WriteHeader(c.status)
			io.WriteString(w, c.body)
		}))
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		resp, err := longpoll.Do(srv.Client(), req, "s3cret")
		switch {
		case c.ok && err != nil:
			t.Errorf("status %d: got %v, want a success", c.status, err)
		case c.ok:
			resp.Body.Close()
		case err == nil || err.Error() != c.wantErr:
			t.Errorf("status %d: got error %v, want %q", c.status, err, c.wantErr)
		default:
			var se *longpoll.StatusError
			if !errors.As(err, &se) || se.Code != c.status || se.Header.Get("X-Seen") != "1" {
				t.Errorf("status %d: got %#v, want a StatusError with the code and headers", c.status, err)
			}
		}
		srv.Close()
	}
}

func TestPost(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = r.Method + " " + r.Header.Get("Content-Type") + " " + string(b)
		w.WriteHeader(http.StatusAccepted) // any 2xx is a success
	}))
	defer srv.Close()
	if err := longpoll.Post(context.Background(), srv.Client(), srv.URL, "", map[string]int{"n": 1}, time.Minute); err != nil {
		t.Fatalf("Post: %v", err)
	}
	if want := `POST application/json {"n":1}`; got != want {
		t.Errorf("server got %q, want %q", got, want)
	}
}

func TestBackoffCheck(t *testing.T) {
	for _, c := range []struct {
		b       longpoll.Backoff
		wantErr string
	}{
		{longpoll.Backoff{}, ""},
		{longpoll.Backoff{Min: time.Second}, ""}, // Max defaults to 5s
		{longpoll.Backoff{Min: time.Second, Max: time.Millisecond}, "backoff from 1s to 1ms"},
		{longpoll.Backoff{Min: -1}, "want MinBackoff positive"},
		{longpoll.Backoff{Min: 10 * time.Second}, "backoff from 10s to 5s"},
	} {
		err := c.b.Check()
		if (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%+v: got %v, want %q", c.b, err, c.wantErr)
		}
	}
}

func TestLoopBacksOff(t *testing.T) {
	// Four failures in a row double the wait up to Max; a success resets
	// it; the loop ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outcomes := []error{errors.New("1"), errors.New("2"), errors.New("3"), errors.New("4"), nil, errors.New("5")}
	calls := 0
	var waits []time.Duration
	b := longpoll.Backoff{Min: time.Millisecond, Max: 4 * time.Millisecond}
	b.Loop(ctx, func(context.Context) error {
		if calls == len(outcomes) {
			cancel()
			return errors.New("stopped")
		}
		calls++
		return outcomes[calls-1]
	}, func(err error, wait time.Duration) {
		waits = append(waits, wait)
	})
	bounds := []time.Duration{1, 2, 4, 4, 1} // in ms, after each failure
	if len(waits) != len(bounds) {
		t.Fatalf("got %d waits %v, want %d: one per failure, none once the context is done", len(waits), waits, len(bounds))
	}
	for i, w := range waits {
		if hi := bounds[i] * time.Millisecond; w < hi/2 || w > hi {
			t.Errorf("wait %d: %v, want between %v and %v", i, w, hi/2, hi)
		}
	}
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://rules:8083/", "http://rules:8083"},
		{"https://balancer.example", "https://balancer.example"},
		{"rules:8083", ""},
		{"ftp://x", ""},
		{"http://", ""},
	} {
		u, err := longpoll.ParseURL(c.in)
		if got := ""; err == nil {
			got = u.String()
			if got != c.want {
				t.Errorf("ParseURL(%q) = %q, want %q", c.in, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("ParseURL(%q): %v, want %q", c.in, err, c.want)
		}
	}
}
