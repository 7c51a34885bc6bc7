// Package redistest starts real redis-server processes for tests: a
// standalone server ([Standalone], [NewStandalone]) or a Redis Cluster
// ([StartCluster], [NewCluster]), on free loopback ports, each in its own
// temporary directory, with persistence off.
//
// Nothing here is a mock: tests talk to the same server binary production
// uses, and fault injection is done to the real processes (SIGKILL, SIGSTOP,
// SIGCONT). A missing redis-server binary is a test failure, never a skip.
//
// The variants that take a test (TB) stop their servers in t.Cleanup. The New variants
// take no testing.TB, for TestMain: they return a stop function the caller
// must run, so one cluster can serve every test of a package.
package redistest

// TB is the part of testing.TB the helpers that take a test use. It is
// declared here, rather than importing package testing, because
// `sluice bench --local` and `sluice plan --measure` start their servers
// through this package too, and the binary should not link package testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}
