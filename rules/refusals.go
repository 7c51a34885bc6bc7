package rules

import "fmt"

// Refusals says whether a refused request spends a rule's tokens.
type Refusals string

// The values of Rule.Refusals.
const (
	// RefusalsFree is the default: a refused request takes nothing, so a
	// client that waits its Retry-After passes.
	RefusalsFree Refusals = "free"
	// RefusalsCount spends a refused request's cost anyway, leaving the
	// key in debt (at most one burst): a client that ignores 429 and keeps
	// sending stays refused until it stops. For clients that ignore 429.
	RefusalsCount Refusals = "count"
)

func (r Refusals) check() error {
	switch r {
	case "", RefusalsFree, RefusalsCount:
		return nil
	}
	return fmt.Errorf("%q is not free or count", string(r))
}

// CountsRefusals reports whether r's refused requests spend its tokens.
func (r *Rule) CountsRefusals() bool { return r != nil && r.Refusals == RefusalsCount }
