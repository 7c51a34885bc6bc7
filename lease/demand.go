package lease

import "sync/atomic"

// demandSlots is how many slots the demand sketch has: keys hash into
// them, so keys in one slot share its count and look busier together than
// each is. 16,384 slots of 16 bytes: 256 KB a store, and a gateway serving a
// few thousand requests a second sees a collision in a window only rarely.
const demandSlots = 1 << 14

// slot is one cell of the demand sketch: how many requests hashed here in
// the current and the previous demand window, counted only up to 2 since a
// key is either quiet (at most one request a window) or not; and how many
// entries of the store's shards that hash here may hold something for
// their key (entry.held). Both are read and written without a lock.
type slot struct {
	// word packs the window's number (bits 16 to 47), the requests in it
	// (bits 8 to 15) and in the window before (bits 0 to 7).
	word    atomic.Uint64
	holding atomic.Int32
}

// see counts a request in window w and returns the slot's requests in the
// current and the previous window, each at most 2. A slot already at 2 in
// this window is only read, so that a busy key's requests do not contend
// on writing it.
func (s *slot) see(w uint32) (cur, prev uint64) {
	for {
		old := s.word.Load()
		cur, prev = old>>8&0xff, old&0xff
		switch uint32(old >> 16) {
		case w:
			if cur >= 2 {
				return cur, prev
			}
		case w - 1:
			cur, prev = 0, cur
		default:
			cur, prev = 0, 0
		}
		cur++
		if s.word.CompareAndSwap(old, uint64(w)<<16|cur<<8|prev) {
			return cur, prev
		}
	}
}
