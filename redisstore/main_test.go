package redisstore_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// One standalone server and one 3-primary cluster serve every test of the
// package: a cluster takes seconds to form. Tests keep apart by using keys
// of their own; the few that break a server start their own.
var (
	standalone *redistest.Server
	cluster    *redistest.Cluster
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, stopS, err := redistest.NewStandalone()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisstore tests:", err)
		return 1
	}
	defer stopS()
	c, stopC, err := redistest.NewCluster(3, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisstore tests:", err)
		return 1
	}
	defer stopC()
	standalone, cluster = s, c
	return m.Run()
}
