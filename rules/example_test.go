package rules_test

import (
	"errors"
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

// A gateway matches a request's path with MatchEndpoint, and answers 400
// to a spelling that reaches the endpoint only on a lenient server.
func ExampleSet_MatchEndpoint() {
	set, err := rules.Parse("example", []byte(`
endpoints:
  - {name: login, method: POST, path: /v1/login}
rules:
  - scope: endpoint
    match: {endpoint: login}
    limits: [{name: login, rate: 5, per: 1m}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range []string{"/v1/login", "/V1/Login", "/v1/login;jsessionid=7", "/v1/login.", `/v1\login`, "/v1/other"} {
		ep, ok, err := set.MatchEndpoint("POST", p)
		switch {
		case errors.Is(err, rules.ErrPathSpelling):
			fmt.Println("400:", err)
		case ok:
			fmt.Println(p, "is", ep.Name)
		default:
			fmt.Println(p, "is no endpoint")
		}
	}
	// Output:
	// /v1/login is login
	// /V1/Login is login
	// /v1/login;jsessionid=7 is login
	// 400: path "/v1/login." is another spelling of endpoint login: its segment "login." ends in a dot or a space, which some servers drop; send /v1/login
	// 400: path "/v1\\login" is another spelling of endpoint login: it holds a backslash, which some servers read as /; send /v1/login
	// /v1/other is no endpoint
}

// A decimal rate is enforced exactly, as whole tokens over a longer period.
func ExampleRate() {
	set, err := rules.Parse("example", []byte(`
rules:
  - scope: default
    limits: [{name: s, rate: 1.5, per: 1s}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(set.Resolve(time.Now(), rules.Query{APIKey: "k"}).Limits[0])
	// Output:
	// s: 3 per 2s, burst 3, token_bucket
}
