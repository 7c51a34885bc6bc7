package bench_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/bench"
)

// Scenarios scale with the offered rate: at 2,000 requests a second the
// retry storm's key is allowed 6 a second (300 times less), and the hot
// tenant's own limit is a quarter below what it sends.
func ExampleSelectScenarios() {
	scs, err := bench.SelectScenarios(bench.Scenarios(2000), "storm,hot")
	if err != nil {
		panic(err)
	}
	for _, s := range scs {
		st := s.Streams[0]
		fmt.Printf("%s: %s at %.0f a second, %s\n", s.Name, st.Name, st.Rate, st.Limit)
	}
	// Output:
	// storm: storm at 2000 a second, s: 6 per 1s, burst 6, token_bucket
	// hot: hot at 1980 a second, s: 1584 per 1s, burst 1584, token_bucket
}
