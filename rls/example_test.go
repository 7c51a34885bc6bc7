package rls_test

import (
	"context"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rls"
)

// A configuration in envoyproxy/ratelimit's format, served from the
// in-process store: two messages an hour to each number.
func Example() {
	rules, _, err := rls.ParseRules("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: to_number
    rate_limit:
      unit: hour
      requests_per_unit: 2
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	svc, err := rls.New(rls.Config{Store: memstore.New(memstore.Config{}), Rules: rules})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "2061111111"}}},
	}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetLimitRemaining(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit())
	}
	// Output:
	// OK 1 2 HOUR
	// OK 0 2 HOUR
	// OVER_LIMIT 0 2 HOUR
}
