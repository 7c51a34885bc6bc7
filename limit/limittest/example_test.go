package limittest_test

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limit/limittest"
)

// A store under test reads the clock through its Now func; the test moves
// time instead of sleeping.
func ExampleClock() {
	clock := limittest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	now := clock.Now // what a store's Config.Now gets
	clock.Advance(1500 * time.Millisecond)
	fmt.Println(now().Format(time.TimeOnly + ".000"))
	// Output: 12:00:01.500
}
