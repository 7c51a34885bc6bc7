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
// Each request is one limit.Request per cost (hits_addend): the key is
// the domain, and each limited descriptor is one limit named for its
// entries (see counterName). So every descriptor of a request is checked
// and taken in one atomic store call, all or nothing (descriptors of
// different costs in one call per cost, cheapest first, up to the first
// refusal), and a descriptor's counter is shared by all
// requests that carry it, whatever else they carry. The price is that a
// domain's counters live on one Redis Cluster slot; docs/envoy.md says
// more.
package rls
