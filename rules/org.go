package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sluice-rl/sluice/limit"
)

// An org rule limits the sum of an organization's keys, and a request is
// checked against its key's limits and its org's in one store call, all
// or nothing. One call means one shard: in Redis Cluster the part of a
// Redis key between braces picks the slot, and a store puts the whole of
// limit.Request.Key there. So a request of a key with org rules is taken
// under its org's store key (StoreKey), and its key's own limits are
// renamed with a hash of the API key (AppendStoreLimits), which keeps two
// keys of one org apart in the org's slot. Every gateway computes the same
// names, so they share the buckets.

// OrgKeyPrefix starts the store key of an organization: the gateway's own
// keys start "k:" or "ip:", so the three kinds never share a bucket.
const OrgKeyPrefix = "o:"

// StoreKey returns the key a request resolved to r is taken under: the
// org's ("o:" and its name) when org rules apply to it, else key, the
// caller's own store key ("k:" and the API key).
func (r *Resolution) StoreKey(key string) string {
	if r.Org == "" {
		return key
	}
	return OrgKeyPrefix + r.Org
}

// AppendStoreLimits appends to buf the limits a store takes for a request
// of apiKey resolved to r, Limits then Shadow, and returns the extended
// slice. Without org rules they are r's own. With them, the key's limits
// are renamed "NAME~k" and a hash of apiKey, and the org's "NAME~org", so
// that under the org's store key each key keeps its buckets and the org
// has its own; names over 64 bytes are shortened with a hash of the whole
// name. Decision.Index still indexes r.Limits: the order is kept.
func (r *Resolution) AppendStoreLimits(buf []limit.Limit, apiKey string) []limit.Limit {
	if r.Org == "" {
		return append(append(buf, r.Limits...), r.Shadow...)
	}
	sum := sha256.Sum256([]byte(apiKey))
	var ks [21]byte
	ks[0] = 'k'
	hex.Encode(ks[1:], sum[:10])
	keySuffix := string(ks[:])
	add := func(ls []limit.Limit, org int) {
		for i, l := range ls {
			if i < len(ls)-org {
				l.Name = storeName(l.Name, keySuffix)
			} else {
				l.Name = storeName(l.Name, "org")
			}
			buf = append(buf, l)
		}
	}
	add(r.Limits, r.OrgLimits)
	add(r.Shadow, r.OrgShadow)
	return buf
}

// storeName returns name+"~"+suffix, or when that is over 64 bytes (the
// longest limit name) the name's first 24 bytes, "~" and a hash of the
// whole, which no two names share.
func storeName(name, suffix string) string {
	if len(name)+1+len(suffix) <= 64 {
		return name + "~" + suffix
	}
	sum := sha256.Sum256([]byte(name + "~" + suffix))
	return name[:24] + "~" + hex.EncodeToString(sum[:16])
}

// checkOrg reports whether o can name an organization: the rule of API
// keys (CheckKey), since it becomes a store key the same way.
func checkOrg(o string) error {
	if err := CheckKey(o); err != nil {
		return fmt.Errorf("org name: %s", strings.TrimPrefix(err.Error(), "API key "))
	}
	return nil
}
