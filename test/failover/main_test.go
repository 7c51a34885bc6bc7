// Package failover proves the limiter's failure promises end to end, on a
// real Redis Cluster of three primaries with one replica each: leases never
// let the fleet over a limit, the refusal cache bounds what a runaway client
// costs its shard, and a killed or frozen primary degrades only its keys to
// local limits (fail-closed limits refuse) until its replica takes over.
// docs/failure-modes.md reports what these tests measure.
package failover

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// cluster serves every test of the package: forming one takes seconds. The
// tests that break a node restart it and wait for the cluster to be whole
// before they return, so tests run one after another, never in parallel.
var cluster *redistest.Cluster

// sluice is the binary the process tests run, built on first use.
var sluice proctest.Binary

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, stop, err := redistest.NewCluster(3, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover tests:", err)
		return 1
	}
	defer stop()
	cluster = c
	defer sluice.Close()
	return m.Run()
}
