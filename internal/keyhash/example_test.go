package keyhash_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/keyhash"
)

// A gateway's API key reaches the rules service's shadow report in the
// form the gateway's decision log writes it.
func ExampleOf() {
	fmt.Println(keyhash.Of("k:key_pro"))
	fmt.Println(keyhash.Of("ip:192.0.2.7"))
	// Output:
	// k:b4baa77453198c33
	// ip:8ad0425705eb00f8
}
