package gateway

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/rules"
)

// Key prefixes keep the kinds of caller apart in the store: an API key can
// never name the same bucket as a client address. (Shadow rules never
// spend an enforced rule's tokens: their limits have buckets of their own
// under the same key, limit.Limit.Shadow.) shadowLogPrefix keys the
// sampling of shadow log lines apart from the decision log's.
const (
	keyPrefix       = "k:"
	addrPrefix      = "ip:"
	shadowLogPrefix = "shadow:"
)

// caller is who a request is limited as.
type caller struct {
	// apiKey is the API key, empty for a request without one.
	apiKey string
	// key is the store key: the kind prefix and the API key or address.
	key string
	// info is the key's directory entry, when known says it has one.
	info  rules.KeyInfo
	known bool
}

// identify finds the caller of r: its API key, else its client address.
// With UnknownKeysAsAddress, a key set's directory does not hold is
// limited as the client address too.
func (l *Limiter) identify(r *http.Request, set *rules.Set) (caller, error) {
	k, err := apiKey(r.Header)
	if err != nil {
		return caller{}, err
	}
	if k != "" {
		info, known := set.Key(k)
		if known || !l.unknownKeysAsAddress {
			return caller{apiKey: k, key: keyPrefix + k, info: info, known: known}, nil
		}
	}
	return caller{key: addrPrefix + l.clientAddr(r)}, nil
}

// apiKey returns the key in X-API-Key or in an Authorization: Bearer
// header. A key no rules file could hold is a 400 rather than a new bucket
// per variant. So is a request that names two keys, in two X-API-Key or
// Authorization lines, in one line joined by commas, or in both headers
// with different values: sluice does not authenticate keys, so were one of
// them preferred, a client could send a fresh invented key beside the real
// one its upstream checks, and get a fresh bucket each time.
func apiKey(h http.Header) (string, error) {
	// The canonical forms, so that no lookup canonicalizes (and allocates).
	xs, auths := h["X-Api-Key"], h["Authorization"]
	switch {
	case len(xs) > 1:
		return "", newError(http.StatusBadRequest, fmt.Sprintf("X-API-Key appears %d times; send one API key", len(xs)), nil)
	case len(auths) > 1:
		return "", newError(http.StatusBadRequest, fmt.Sprintf("Authorization appears %d times; send one", len(auths)), nil)
	}
	var k, bearer string
	if len(xs) == 1 {
		k = xs[0]
	}
	if len(auths) == 1 {
		if auth := auths[0]; len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			bearer = strings.TrimLeft(auth[7:], " ")
		}
	}
	from := "X-API-Key"
	switch {
	case k != "" && bearer != "" && k != bearer:
		return "", newError(http.StatusBadRequest,
			"X-API-Key and the Bearer token in Authorization hold different keys; send one API key", nil)
	case k == "":
		k, from = bearer, "Authorization"
	}
	if k == "" {
		return "", nil
	}
	// RFC 9110 reads "X-API-Key: a, b" as the same field as two lines,
	// and a Bearer token (token68) never holds a comma, so a comma means
	// two keys folded into one line, by the client or a proxy on the way.
	if n := strings.Count(k, ",") + 1; n > 1 {
		return "", newError(http.StatusBadRequest,
			fmt.Sprintf("%s holds %d comma-separated values; send one API key", from, n), nil)
	}
	if err := rules.CheckKey(k); err != nil {
		return "", newError(http.StatusBadRequest, fmt.Sprintf("%s: %v", from, err), nil)
	}
	return k, nil
}

// clientAddr returns the address a request without an API key is limited
// by: the TCP peer, or when the peer is a trusted proxy the rightmost
// X-Forwarded-For address that is not itself a trusted proxy. IPv6 clients
// are grouped by their /64, which is what one subscriber usually holds.
func (l *Limiter) clientAddr(r *http.Request) string {
	peer, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return "unknown"
	}
	if l.trusted(peer) {
		peer = l.forwardedFor(r.Header, peer)
	}
	if peer.Is6() {
		p, err := peer.Prefix(64)
		if err == nil {
			return p.String()
		}
	}
	return peer.String()
}

// forwardedFor walks X-Forwarded-For from the right, starting from a
// trusted peer, and returns the first address not in the trusted list. An
// entry that is not an address ends the walk: the hop before it, which is
// trusted, is the best we know.
func (l *Limiter) forwardedFor(h http.Header, peer netip.Addr) netip.Addr {
	values := h.Values("X-Forwarded-For")
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for v != "" {
			var hop string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = v[j+1:], v[:j]
			} else {
				hop, v = v, ""
			}
			a, ok := parseAddr(strings.TrimSpace(hop))
			if !ok {
				return peer
			}
			peer = a
			if !l.trusted(a) {
				return a
			}
		}
	}
	return peer
}

func (l *Limiter) trusted(a netip.Addr) bool {
	return slices.ContainsFunc(l.trustedProxies, func(p netip.Prefix) bool { return p.Contains(a) })
}

// parseAddr reads "addr", "addr:port", "[v6]:port" or "[v6]", dropping any
// zone and unmapping IPv4-in-IPv6.
func parseAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}
