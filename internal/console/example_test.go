package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluice-rl/sluice/internal/console"
)

// A console over an admin API: the rules service mounts it this way, with
// its own admin handler and token check.
func ExampleNew() {
	api := http.NewServeMux() // the admin API, /admin/v1
	c := console.New(console.Config{
		API: api,
		Authenticate: func(secret string) (name string, write bool, ok bool) {
			return "alice", true, secret == "a-write-token-of-16+"
		},
	})
	mux := http.NewServeMux()
	mux.Handle(console.Prefix+"/", c)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/rules", nil))
	fmt.Println(rec.Code, rec.Header().Get("Location"))
	fmt.Println(rec.Header().Get("Content-Security-Policy") == console.CSP)
	// Output:
	// 303 /ui/login
	// true
}
