package rulesapi_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/rulesapi"
)

// A gateway's API key reaches the rules service's shadow report in the
// form the gateway's decision log writes it.
func ExampleKeyHash() {
	fmt.Println(rulesapi.KeyHash("k:key_pro"))
	fmt.Println(rulesapi.KeyHash("ip:192.0.2.7"))
	// Output:
	// k:b4baa77453198c33
	// ip:8ad0425705eb00f8
}

func ExampleCheckGatewayID() {
	fmt.Println(rulesapi.CheckGatewayID("gw-eu-1"))
	fmt.Println(rulesapi.CheckGatewayID("gw eu 1"))
	// Output:
	// <nil>
	// gateway ID "gw eu 1" may hold only printable ASCII without spaces
}
