package lease

import (
	"github.com/sluice-rl/sluice/limit"
)

// SettleLocal settles as much as it can of delta, the true cost of a
// request of req's key and limits less the estimate it took, against this
// gateway's leased tokens for them, without a call to the shared store,
// and returns the rest for the shared store to settle (0 when nothing is
// left). A positive delta spends leased tokens the key holds here; a
// negative one puts the unused tokens back in a lease that is still live,
// up to one batch held, since they left the shared store with it and a
// lease's tokens are dropped, never revived, when it ends. A key with no
// live lease here, or a request with shadow limits (never served from a
// lease), settles nothing locally. It is safe for concurrent use.
func (s *Store) SettleLocal(req *limit.Request, delta int64) (rest int64) {
	if delta == 0 || req.HasShadow() {
		return delta
	}
	now := s.now().UnixMilli()
	var buf [128]byte
	id := appendID(buf[:0], req)
	sh := s.shards.At(s.shards.Hash(req.Key))
	sh.Lock()
	e := sh.M[string(id)]
	sh.Unlock()
	if e == nil {
		return delta
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.mark(now)
	b := &e.b
	b.expire(now)
	if delta > 0 {
		n := min(b.tokens, delta)
		b.tokens -= n
		return delta - n
	}
	if now >= b.expires {
		return delta
	}
	n := min(max(s.batch(req)-b.tokens, 0), -delta)
	b.tokens += n
	return delta + n
}
