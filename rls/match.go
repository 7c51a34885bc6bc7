package rls

import (
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// lookup returns the descriptor an entry with value v matches: the one
// with that value, else the longest wildcard prefix of v, else the one
// without a value; nil when none does.
func (k *keyed) lookup(v string) *node {
	if n := k.exact[v]; n != nil {
		return n
	}
	for _, n := range k.wild {
		if strings.HasPrefix(v, n.value) {
			return n
		}
	}
	return k.any
}

// segment is n's part of a metric name when it matched value v: "key" for
// a descriptor without a value, "key_prefix*" for a wildcard, "key_value"
// for an exact one. A descriptor with detailed_metric names v itself.
func (n *node) segment(v string) string {
	switch {
	case n.detailed && v != "":
		return n.key + "_" + v
	case n.wildcard:
		return n.key + "_" + n.value + "*"
	case n.value != "":
		return n.key + "_" + n.value
	}
	return n.key
}

// match finds the descriptor configured for entries in domain, as
// envoyproxy/ratelimit does: the request's entries walk the nested lists
// level by level, and only the descriptor reached by the last entry
// applies, if it has a rate_limit. It returns nil when none is configured,
// and the metric name of the match.
func (r *Rules) match(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) (*node, string) {
	c := r.domains[domain]
	if c == nil || len(entries) == 0 {
		return nil, ""
	}
	var path [maxDepth]*node
	var n *node
	detailed := false
	for i, e := range entries {
		if i >= maxDepth || c == nil {
			return nil, ""
		}
		k := (*c)[e.GetKey()]
		if k == nil {
			return nil, ""
		}
		if n = k.lookup(e.GetValue()); n == nil {
			return nil, ""
		}
		path[i] = n
		detailed = detailed || n.detailed
		c = &n.next
	}
	if n.rule == nil {
		return nil, ""
	}
	if !detailed {
		return n, n.metric
	}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(path[i].segment(e.GetValue()))
	}
	return n, b.String()
}
