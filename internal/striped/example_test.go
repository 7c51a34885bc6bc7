package striped_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/striped"
)

// A map of when each key was last seen (in ms), swept of the keys not seen
// for a second, at most once a second.
func Example() {
	m := striped.New[string, int64](1)
	see := func(key string, now int64) {
		s := m.Of(key)
		s.Lock()
		defer s.Unlock()
		s.M[key] = now
		if s.Due(now, 1000) {
			s.Sweep(now, func(_ string, seen int64) bool { return now-seen >= 1000 })
		}
	}
	see("a", 0)
	see("b", 500)
	fmt.Println(m.Len())
	see("c", 1200) // a second since the last sweep: "a" goes
	fmt.Println(m.Len())
	// Output:
	// 2
	// 2
}
