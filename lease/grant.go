package lease

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Grant is a batch of tokens handed out with its lifetime: a lease on a
// lease, as a relay hands its gateways.
type Grant struct {
	// Granted is how many tokens were taken: at least the request's cost,
	// or 0 when it was refused.
	Granted int64
	// TTL is how long the granted tokens may be spent, counted from when
	// the call that took them was made. Tokens the holder has not spent by
	// then are dropped. It is never longer than what is left of the lease
	// they came from.
	TTL time.Duration
	// Decision describes the limits after the take, or the refusal.
	Decision limit.Decision
}

// Leaser is a limit.Granter whose grants carry their own lifetime. A
// Store over a Leaser (a gateway over its relay) drops the tokens it holds
// no later than the Leaser said, counted from before its call, so that a
// sub-lease never outlives the lease it was cut from. Store itself is one.
// Lease is called as often as TakeUpTo would be and holds the Store
// contract (limit.Store): valid requests in, nothing of them kept.
type Leaser interface {
	limit.Granter
	// Lease takes as many tokens as can be spared, at least req's cost and
	// at most want, as TakeUpTo does, and says how long they last.
	Lease(ctx context.Context, req *limit.Request, want int64) (Grant, error)
}

var _ Leaser = (*Store)(nil)

// Lease implements Leaser: a sub-lease of up to want tokens for req's key,
// cut from this store's lease when it holds enough, else from a batch it
// takes from the inner store (keeping the rest), or for a quiet key from
// the inner store directly. A refusal is remembered as Take's are. A
// relay serves its gateways with Lease: its demand for a key counts the
// tokens asked for, so its batch follows the sum of its gateways' batches.
func (s *Store) Lease(ctx context.Context, req *limit.Request, want int64) (Grant, error) {
	start := s.now().UnixMilli()
	d, tk, err := s.take(ctx, req, max(want, req.EffectiveCost()), start)
	if err != nil || tk.n == 0 || !d.Allowed {
		return Grant{Decision: d}, err
	}
	ttl := s.ttl
	if tk.until != 0 {
		ttl = tk.until - start
	}
	return Grant{Granted: tk.n, TTL: time.Duration(ttl) * time.Millisecond, Decision: d}, nil
}

// TakeUpTo implements limit.Granter through Lease, leaving out the
// lifetime: for a caller that spends the tokens at once.
func (s *Store) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	g, err := s.Lease(ctx, req, want)
	return g.Granted, g.Decision, err
}

// Held reports how many keys the store holds an entry for and the leased
// tokens they hold, unspent and unexpired: what a relay loses, under the
// limit, if it stops. It locks each entry in turn: for metrics, not the
// request path.
func (s *Store) Held() (entries int, tokens int64) {
	now := s.now().UnixMilli()
	stripes := s.shards.Stripes()
	for i := range stripes {
		st := &stripes[i]
		st.Lock()
		entries += len(st.M)
		for _, e := range st.M {
			e.mu.Lock()
			if now < e.b.expires {
				tokens += e.b.tokens
			}
			e.mu.Unlock()
		}
		st.Unlock()
	}
	return entries, tokens
}
