package rls

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-rl/sluice/limit"
)

// rateHeaders describes the caller's budget b with the header fields
// sluice's gateway sends (limit.Budget.AppendFields), for Envoy's
// response_headers_to_add: Envoy adds them to the client's response,
// allowed or refused.
func rateHeaders(b *limit.Budget) []*corev3.HeaderValue {
	var arr [6]limit.Field
	fields := b.AppendFields(arr[:0])
	hs := make([]*corev3.HeaderValue, len(fields))
	for i, f := range fields {
		hs[i] = &corev3.HeaderValue{Key: f.Name, Value: f.Value}
	}
	return hs
}
