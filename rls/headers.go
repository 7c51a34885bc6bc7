package rls

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-rl/sluice/limit"
)

// rateHeaders describes the caller's budget b with the header fields
// sluice's gateway sends (limit.Budget.AppendValues), for Envoy's
// response_headers_to_add: Envoy adds them to the client's response,
// allowed or refused.
func rateHeaders(b *limit.Budget) []*corev3.HeaderValue {
	var arr [6]string
	vals := b.AppendValues(arr[:0])
	hs := make([]*corev3.HeaderValue, len(vals))
	for i, v := range vals {
		hs[i] = &corev3.HeaderValue{Key: limit.FieldName(i), Value: v}
	}
	return hs
}
