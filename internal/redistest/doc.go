// Package redistest starts real redis-server processes for tests: a
// standalone server ([Standalone], [NewStandalone]) or a Redis Cluster
// ([StartCluster], [NewCluster]), on free loopback ports, each in its own
// temporary directory, with persistence off.
//
// Nothing here is a mock: tests talk to the same server binary production
// uses, and fault injection is done to the real processes (SIGKILL, SIGSTOP,
// SIGCONT). A missing redis-server binary is a test failure, never a skip.
//
// The testing.TB variants stop their servers in t.Cleanup. The New variants
// take no testing.TB, for TestMain: they return a stop function the caller
// must run, so one cluster can serve every test of a package.
package redistest
