package redistest_test

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// A TestMain shares one server (or cluster) among a package's tests with the
// New variants; tests use Standalone(t) or StartCluster(t, ...) instead.
func ExampleNewStandalone() {
	srv, stop, err := redistest.NewStandalone()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	reply, err := srv.Do(context.Background(), "PING")
	fmt.Println(reply, err)
	// Output: PONG <nil>
}
