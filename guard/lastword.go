package guard

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice/limit"
)

// The table of last words holds lastStripes × lastWays keys: a recently
// decided key is remembered unless a busier key shares its place.
const (
	lastStripes = 64
	lastWays    = 128
)

// lastWords remembers, for recently decided keys, what the shared store
// last said about one limit of each: the tokens the deciding limit
// (Decision.Index) had left, and when. A key's local fallback starts from
// that word rather than from a full bucket, so an outage does not hand
// every gateway a fresh burst of a key that had spent its own.
//
// It is a fixed table (lastStripes × lastWays), each key at one place
// chosen by its hash: a key that lands on another's place takes it, so
// memory is bounded and a write costs a hash and a short lock. A key whose
// word was overwritten starts full, as it did before words were kept. It
// is safe for concurrent use.
type lastWords struct {
	seed    maphash.Seed
	stripes [lastStripes]lastStripe
}

// lastStripe is one lock's share of the table.
type lastStripe struct {
	mu    sync.Mutex
	words [lastWays]lastWord // guarded by mu
	// held says which places hold a word, so that the local fallback,
	// which asks on every answer, takes no lock once its key's word is
	// spent. Written under mu.
	held [lastWays]atomic.Bool
}

// lastWord is what the shared store last said about one limit of key.
type lastWord struct {
	key       string // empty: no word
	name      string // the limit's name
	burst     int64  // its effective burst then: a changed limit is not seeded
	remaining int64  // tokens it had left after that call
	at        int64  // when, in Unix ms on the Store's clock
}

func newLastWords() *lastWords { return &lastWords{seed: maphash.MakeSeed()} }

// place returns the stripe and way that hold key.
func (w *lastWords) place(key string) (*lastStripe, int) {
	h := maphash.String(w.seed, key)
	return &w.stripes[h%lastStripes], int((h >> 32) % lastWays)
}

// note remembers d, the shared store's answer to req at now (Unix ms).
func (w *lastWords) note(now int64, req *limit.Request, d *limit.Decision) {
	if d.Index < 0 || d.Index >= len(req.Limits) {
		return
	}
	l := &req.Limits[d.Index]
	st, i := w.place(req.Key)
	st.mu.Lock()
	st.words[i] = lastWord{key: req.Key, name: l.Name, burst: l.EffectiveBurst(), remaining: d.Remaining, at: now}
	if !st.held[i].Load() {
		st.held[i].Store(true)
	}
	st.mu.Unlock()
}

// take returns and forgets key's word, if it has one said no later than
// now: each word seeds one local bucket once.
func (w *lastWords) take(key string, now int64) (lastWord, bool) {
	st, i := w.place(key)
	if !st.held[i].Load() {
		return lastWord{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	lw := st.words[i]
	if lw.key != key || lw.at > now {
		return lastWord{}, false
	}
	st.words[i] = lastWord{}
	st.held[i].Store(false)
	return lw, true
}

// seedCost is how many tokens a fresh local bucket for local (l scaled by
// part) must spend at once to hold lw's remaining tokens at the same part:
// zero when lw does not speak of l (another limit, or l since changed) or
// the shared bucket was full.
func seedCost(lw lastWord, l, local *limit.Limit, part limit.Fraction) int64 {
	if lw.name != l.Name || lw.burst != l.EffectiveBurst() {
		return 0
	}
	burst := local.EffectiveBurst()
	return burst - min(burst, max(0, part.Of(lw.remaining, limit.RoundUp)))
}
