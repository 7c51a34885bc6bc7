// Package regions proves the quota balancer end to end: three regions, each
// a real redis-server and a real gateway process, and one real balancer
// process, all on loopback with intervals of 200 ms instead of 10 s. A
// client's traffic moves between regions, settles in a 60/30/10 split, loses
// the balancer, loses a whole region, and reaches the balancer only through
// a slow proxy; the tests check the global limit holds and measure how fast
// shares follow. docs/regions.md reports what they measure.
package regions

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// regionNames are the three regions every test runs.
var regionNames = []string{"us", "eu", "ap"}

// redises are the regions' Redis servers, one each, shared by the tests:
// each test uses its own keys. A test that kills one restarts it.
var redises []*redistest.Server

// sluice is the binary the tests run, built on first use.
var sluice proctest.Binary

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	for range regionNames {
		s, stop, err := redistest.NewStandalone()
		if err != nil {
			fmt.Fprintln(os.Stderr, "regions tests:", err)
			return 1
		}
		defer stop()
		redises = append(redises, s)
	}
	return sluice.RunTests(m)
}
