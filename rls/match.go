package rls

import (
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// lookup returns the descriptor an entry with value v matches: the one
// with that value, else the wildcard pattern with the most literal bytes
// that matches v (the first configured among equals), else the one
// without a value; nil when none does.
func (k *keyed) lookup(v string) *node {
	if n := k.exact[v]; n != nil {
		return n
	}
	for _, n := range k.wild {
		if glob(n.value, v) {
			return n
		}
	}
	return k.any
}

// glob reports whether v matches pattern, in which each '*' matches any
// run of bytes, the empty one included, and every other byte itself. It
// takes time proportional to len(pattern)·len(v) at worst.
func glob(pattern, v string) bool {
	px, vx := 0, 0
	starPx, starVx := -1, 0 // the last '*' seen, and where its run would end next
	for px < len(pattern) || vx < len(v) {
		if px < len(pattern) {
			switch c := pattern[px]; {
			case c == '*':
				starPx, starVx = px, vx+1
				px++
				continue
			case vx < len(v) && v[vx] == c:
				px++
				vx++
				continue
			}
		}
		if starPx < 0 || starVx > len(v) {
			return false
		}
		// Let the last '*' take one more byte, and match on from there.
		px, vx = starPx, starVx
	}
	return true
}

// segment is n's part of a metric name when it matched value v: "key" for
// a descriptor without a value, "key_pattern" for a wildcard, "key_value"
// for an exact one. A descriptor with detailed_metric names v itself.
func (n *node) segment(v string) string {
	switch {
	case n.detailed && v != "":
		return n.key + "_" + v
	case n.value != "":
		return n.key + "_" + n.value
	}
	return n.key
}

// found is what one request descriptor matched.
type found struct {
	n      *node  // nil: none configured
	metric string // its metric name, without the domain
	// named are the entries its counter is named for: the request's, but
	// for an entry a share_threshold wildcard matched, that wildcard's
	// pattern; bit i of shared marks entry i as such.
	named  []*ratelimitv3.RateLimitDescriptor_Entry
	shared uint32
}

// match finds the descriptor configured for entries in domain, as
// envoyproxy/ratelimit does: the request's entries walk the nested lists
// level by level, and only the descriptor reached by the last entry
// applies, if it has a rate_limit. Its n is nil when none is configured.
func (r *Rules) match(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) found {
	c := r.domains[domain]
	if c == nil || len(entries) == 0 {
		return found{}
	}
	var path [maxDepth]*node
	var n *node
	var shared uint32
	detailed := false
	for i, e := range entries {
		if i >= maxDepth || c == nil {
			return found{}
		}
		k := (*c)[e.GetKey()]
		if k == nil {
			return found{}
		}
		if n = k.lookup(e.GetValue()); n == nil {
			return found{}
		}
		path[i] = n
		detailed = detailed || n.detailed
		if n.share {
			shared |= 1 << i
		}
		c = &n.next
	}
	if n.rule == nil {
		return found{}
	}
	f := found{n: n, metric: n.metric, named: entries, shared: shared}
	if shared != 0 {
		f.named = make([]*ratelimitv3.RateLimitDescriptor_Entry, len(entries))
		for i, e := range entries {
			f.named[i] = e
			if shared&(1<<i) != 0 {
				f.named[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: e.GetKey(), Value: path[i].value}
			}
		}
	}
	if !detailed {
		return f
	}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(path[i].segment(e.GetValue()))
	}
	f.metric = b.String()
	return f
}
