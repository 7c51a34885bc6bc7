package rulesapi_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/rulesapi"
)

func ExampleCheckGatewayID() {
	fmt.Println(rulesapi.CheckGatewayID("gw-eu-1"))
	fmt.Println(rulesapi.CheckGatewayID("gw eu 1"))
	// Output:
	// <nil>
	// gateway ID "gw eu 1" may hold only printable ASCII without spaces
}
