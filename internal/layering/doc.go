// Package layering holds the order of sluice's packages that
// docs/architecture.md draws, and a test that keeps every import pointing
// down it: a package may import only packages on its own layer or below.
// It has no code of its own; a new package gets a row in Layers, or the
// test names it.
package layering

// Layers lists sluice's packages by import path below the module, lowest
// first. A package may import packages of its own layer or a lower one.
var Layers = [][]string{
	// 0: the shared words and leaf helpers, importing no sluice package.
	{"limit", "internal/keyhash", "internal/striped", "internal/longpoll", "internal/process",
		"internal/rulesapi", "internal/redistest", "internal/pgtest", "internal/proctest", "internal/otlptest"},
	// 1: stores and the rules model, each over limit alone.
	{"memstore", "redisstore", "rules", "limit/limittest", "quota", "inflight"},
	// 2: layers that wrap any store, and what reads the rules model.
	{"lease", "guard", "share", "tracing", "admin", "internal/capacity", "internal/balancer", "internal/relay", "internal/console"},
	// 3: the production stack, and the services' cores and clients.
	{"pipeline", "internal/rulesync", "internal/rulesvc", "internal/sharesync", "internal/balancersvc"},
	// 4: the fronts a request arrives at.
	{"gateway", "rls"},
	// 5: load runs over whole stacks.
	{"internal/bench"},
	// 6: the binary: flags and wiring.
	{"cmd/sluice"},
}
