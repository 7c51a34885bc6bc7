package longpoll_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-rl/sluice/internal/longpoll"
)

// A subscription polls until its context ends, backing off after
// failures: here the server fails twice, then answers.
func ExampleBackoff_Loop() {
	answers := []int{http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusOK}
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(answers[min(n, len(answers)-1)])
		n++
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	longpoll.Backoff{Min: time.Millisecond}.Loop(ctx, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := longpoll.Do(srv.Client(), req, "")
		if err != nil {
			return err
		}
		resp.Body.Close()
		fmt.Println("answered:", resp.Status)
		cancel()
		return nil
	}, func(err error, wait time.Duration) {
		fmt.Println("failed:", err)
	})
	// Output:
	// failed: 503 Service Unavailable
	// failed: 503 Service Unavailable
	// answered: 200 OK
}
