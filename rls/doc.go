// Package rls speaks Envoy's rate limit protocol
// (envoy.service.ratelimit.v3.RateLimitService) over a limit.Store, so
// that sluice can replace envoyproxy/ratelimit behind Envoy, Istio or
// Envoy Gateway by a change of address.
//
// The rules are envoyproxy/ratelimit's YAML configuration (domains, nested
// descriptors, rate_limit with unit and requests_per_unit, unlimited,
// name and replaces, shadow_mode, detailed_metric, '*' wildcards anywhere
// in a value, share_threshold), with three extensions in the rate_limit
// block: algorithm, burst and fail_mode. [LoadRules] compiles them; [Watcher] keeps them current.
//
// Each limited descriptor of a request is a key of its own: the domain and
// the descriptor's entries (see counterName), so a domain's counters spread
// over a Redis Cluster's shards, and a descriptor's counter is shared by
// all requests that carry it, whatever else they carry. A request's
// descriptors are taken at once, one atomic call each, pipelined to each
// node; when one refuses, the others' grants are given back, so a refused
// request takes nothing once its answer is sent, and each descriptor's
// status and remaining are its own limit's. Config.OneKeyPerDomain keeps
// the older layout, every descriptor of a domain under one key, taken all
// or nothing in one call per cost. docs/envoy.md says more.
package rls
