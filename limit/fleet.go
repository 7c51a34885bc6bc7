package limit

import "fmt"

// Fleet is how many gateways share the limits, which the layers that count
// a limit in one gateway's memory (leases, the local fallback) divide it
// by. Build it once and give the same value to every layer. The zero
// value is a fleet of one. It is safe for concurrent use when Count is.
type Fleet struct {
	// Gateways is the size while Count is nil or does not know it. Zero
	// means 1.
	Gateways int
	// Count, if set, reports the current size (a rules service's count, or
	// a census); a result below 1 means unknown, and Gateways is used.
	Count func() int
}

// Size returns the current number of gateways, at least 1.
func (f Fleet) Size() int {
	if f.Count != nil {
		if n := f.Count(); n >= 1 {
			return n
		}
	}
	return max(f.Gateways, 1)
}

// Validate reports a negative Gateways.
func (f Fleet) Validate() error {
	if f.Gateways < 0 {
		return fmt.Errorf("fleet of %d gateways: must not be negative", f.Gateways)
	}
	return nil
}

// IsZero reports whether f is the zero Fleet: neither a size nor a count.
func (f Fleet) IsZero() bool { return f.Gateways == 0 && f.Count == nil }
