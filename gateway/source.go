package gateway

import "github.com/sluice-rl/sluice/limit"

// SourceStore is the source an answer is reported with when its store did
// not say one (an embedding program's own limit.Store that leaves
// Decision.Source empty): in Event.Source, the source label of
// sluice_gateway_decisions_total and the decision log.
const SourceStore limit.Source = "store"

// SourceUnlimited is the source of the Event of a request no limit applied
// to: it passed without asking a store. Such requests have no metric line
// of their own; the rules service counts them to compare a canary.
const SourceUnlimited limit.Source = "unlimited"
