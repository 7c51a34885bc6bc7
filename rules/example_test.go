package rules_test

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

func ExampleSet_Resolve() {
	set, err := rules.Parse("example", []byte(`
keys:
  key_8f3: {plan: pro}
endpoints:
  - {name: search, method: GET, path: /v1/search, cost: 5}
rules:
  - scope: default
    limits: [{name: s, rate: 10, per: 1s, burst: 20}]
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 100, per: 1s, burst: 200}, {name: m, rate: 5000, per: 1m}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ep, _ := set.Endpoint("GET", "/v1/search")
	res := set.Resolve(time.Now(), rules.Query{APIKey: "key_8f3", Endpoint: ep.Name})
	fmt.Println("cost", res.Cost)
	for _, l := range res.Limits {
		fmt.Println(l)
	}
	// Output:
	// cost 5
	// s: 100 per 1s, burst 200, token_bucket
	// m: 5000 per 1m0s, burst 5000, token_bucket
}
