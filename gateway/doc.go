// Package gateway enforces sluice's rate limits on HTTP requests.
//
// A [Limiter] is net/http middleware: for every request it finds the caller
// (an API key, or the client address when there is none), resolves the
// limits the current rule set gives that caller and endpoint, asks a
// [limit.Store] to take the endpoint's cost from all of them at once, and
// then either passes the request on or answers 429 Too Many Requests.
// Either way the response carries the caller's own budget in the RateLimit
// and RateLimit-Policy fields of the IETF httpapi ratelimit-headers draft
// and in the older X-RateLimit-* fields.
//
// Every answer says where it came from (its Decision's limit.Source: the
// in-process store, Redis, a lease, the refusal cache, the local fallback
// while Redis is down, or a request shed while the gateway was overloaded),
// as far as the store can tell ([limit.FromStore] when it cannot). The
// source is in each [Event], in the source label of the decisions metric,
// and in the decision log: refusals, local-fallback answers and store
// failures, sampled to one line per caller a second, naming the caller by
// a hash.
//
// Errors the gateway answers itself (refusals, bad API keys, an unreachable
// store under a fail-closed limit, an unreachable upstream) are [Error]
// values carrying an HTTP status; one function turns them into RFC 9457
// application/problem+json responses.
//
// The package also has the pieces the sluice binary puts around a Limiter:
// a reverse proxy ([NewProxy]) and a health handler ([Health]).
package gateway
