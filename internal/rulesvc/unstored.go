package rulesvc

import (
	"github.com/sluice-rl/sluice/rules"
)

// The rules service does not store a rule's refusals or an endpoint's
// cost header yet (issue 23 added them to rules files): it refuses them
// with a clear error rather than storing the rest and losing them.

// checkStoredRule refuses a rule field the service cannot store; field
// prefixes the field's name in the error.
func checkStoredRule(field string, r *rules.Rule) error {
	if r.Refusals != "" {
		return badRequest(field+"refusals", "%q is not stored by the rules service yet: set refusals in a rules file (sluice gateway --rules), or leave it out", r.Refusals)
	}
	return nil
}

// checkStoredEndpoint refuses an endpoint field the service cannot store.
func checkStoredEndpoint(ep *rules.Endpoint) error {
	if ep.CostHeader != "" {
		return badRequest("cost_header", "%q is not stored by the rules service yet: set cost_header in a rules file (sluice gateway --rules), or leave it out", ep.CostHeader)
	}
	return nil
}
