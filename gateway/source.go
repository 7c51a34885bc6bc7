package gateway

import (
	"context"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// Source says which path answered a store call: whether a decision was
// counted where every gateway sees it, or guessed by this gateway alone. It
// is Event.Source, the source label of sluice_gateway_decisions_total and a
// field of the decision log.
type Source string

// The sources of an answer. A store implementing [SourcedStore] names its
// own; any other store reads as SourceMemory if it is a *memstore.Store and
// as SourceStore otherwise.
const (
	// SourceMemory is the in-process store: exact for one gateway, the
	// gateway's only count when it shares none.
	SourceMemory Source = "memory"
	// SourceRedis is the shared store's own decision.
	SourceRedis Source = "redis"
	// SourceLease is a token this gateway leased from the shared store
	// earlier and spent from memory.
	SourceLease Source = "lease"
	// SourceRefusalCache is a refusal the shared store made earlier,
	// repeated from memory until its retry time.
	SourceRefusalCache Source = "refusal-cache"
	// SourceLocalFallback is this gateway's own share of the limit,
	// enforced in memory while the shared store cannot answer.
	SourceLocalFallback Source = "local-fallback"
	// SourceFailClosed is a refusal because a fail_mode closed limit could
	// not be checked in the shared store.
	SourceFailClosed Source = "fail-closed"
	// SourceStore is a store that does not say: neither a memstore nor a
	// SourcedStore, or a SourcedStore that answered with no source.
	SourceStore Source = "store"
)

// SourcedStore is a limit.Store that can say which path answered each call.
// A Limiter calls TakeSourced instead of Take on a store that implements it.
// The source is a plain string, one of the Source values, so that stores
// need not import this package.
type SourcedStore interface {
	limit.Store
	// TakeSourced is Take that also names the path that answered. On an
	// error the source may still say why: "fail-closed" for a limit that
	// refused because it could not be checked. An empty source reads as
	// SourceStore.
	TakeSourced(ctx context.Context, req *limit.Request) (d limit.Decision, source string, err error)
}

// fixedSource is the source of every answer of a store that does not say
// its own.
func fixedSource(s limit.Store) Source {
	if _, ok := s.(*memstore.Store); ok {
		return SourceMemory
	}
	return SourceStore
}
