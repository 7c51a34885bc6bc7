// Package keyhash names a store key where the key itself must not be
// written: the gateway's decision log and the rules service's shadow
// report both use it, so a hash in one finds the same caller in the other.
package keyhash

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Of returns how a store key is written where an API key or an address
// must not be: its kind ("k:" for an API key, else "ip:") and the first 8
// bytes of the SHA-256 of the whole key, in hex. An operator who knows a
// key finds its hash with
//
//	printf %s 'k:KEY' | sha256sum | cut -c1-16
func Of(key string) string {
	kind := "ip:"
	if strings.HasPrefix(key, "k:") {
		kind = "k:"
	}
	sum := sha256.Sum256([]byte(key))
	return kind + hex.EncodeToString(sum[:8])
}
