package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/rules"
)

// Example puts a Limiter in front of a handler: the key "demo" may make one
// request a second with bursts of two, so the third request in a row is
// refused.
func Example() {
	set, err := rules.Parse("example.yaml", []byte(`
keys:
  demo: {plan: demo}
rules:
  - scope: plan
    match: {plan: demo}
    limits: [{name: s, rate: 1, per: 1s, burst: 2}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// A stopped clock keeps the output the same on every run.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lim, err := gateway.New(gateway.Config{
		Rules: gateway.StaticRules(set),
		Now:   func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(lim.Middleware(hello))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Header.Set("X-API-Key", "demo")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%s | Retry-After: %q | RateLimit: %s\n", resp.Status, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 OK | Retry-After: "" | RateLimit: "s";r=1;t=1
	// 200 OK | Retry-After: "" | RateLimit: "s";r=0;t=2
	// 429 Too Many Requests | Retry-After: "1" | RateLimit: "s";r=0;t=2
}
