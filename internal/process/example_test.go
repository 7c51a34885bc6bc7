package process_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/internal/process"
)

// A command serves until its context ends, then drains: the request in
// flight finishes before Run returns.
func ExampleRun() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var inflight process.Inflight
	h := inflight.Track(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // as SIGTERM would, while this request runs
		time.Sleep(10 * time.Millisecond)
		io.WriteString(w, "answered")
	}))
	done := make(chan error, 1)
	go func() {
		done <- process.Run(ctx, 5*time.Second, nil, process.Endpoint{Server: process.NewServer(h, nil), Listener: ln})
	}()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body), <-done, inflight.Wait(time.Second))
	// Output: answered <nil> 0
}
