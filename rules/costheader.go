package rules

import (
	"fmt"
	"net/textproto"
	"strings"
)

// checkCostHeader reports whether name can be an endpoint's cost header:
// empty (none), or an HTTP field name that is not one the gateway or the
// transport owns.
func checkCostHeader(name string) error {
	if name == "" {
		return nil
	}
	if len(name) > 64 {
		return fmt.Errorf("%q is %d bytes, longer than 64", name, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return fmt.Errorf("%q is not an HTTP field name: byte %q at %d", name, c, i)
		}
	}
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "Content-Length", "Content-Type", "Transfer-Encoding", "Trailer", "Connection", "Retry-After",
		"Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset":
		return fmt.Errorf("%q is a field the gateway or HTTP itself uses; name one of the upstream's own, such as X-Cost", name)
	}
	return nil
}
