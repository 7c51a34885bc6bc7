package redisstore_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
)

// bucketState is a token bucket's value in Redis, decoded: see
// lua/alg_token_bucket.lua.
type bucketState struct{ credits, ttl, last int64 }

// readBucket reads and decodes the token bucket under rkey on the
// standalone server, failing the test if its value is not 24 bytes of
// three integral doubles.
func readBucket(t *testing.T, rkey string) bucketState {
	t.Helper()
	v, err := standalone.Do(t.Context(), "GET", rkey)
	if err != nil {
		t.Fatalf("GET %s: %v", rkey, err)
	}
	b, ok := v.(string)
	if !ok || len(b) != 24 {
		t.Fatalf("GET %s: got %#v, want 24 bytes", rkey, v)
	}
	var f [3]int64
	for i := range f {
		x := math.Float64frombits(binary.LittleEndian.Uint64([]byte(b[8*i:])))
		if x != math.Trunc(x) {
			t.Fatalf("GET %s: number %d is %v, want an integer", rkey, i, x)
		}
		f[i] = int64(x)
	}
	return bucketState{f[0], f[1], f[2]}
}

// redisInt runs a command on the standalone server that answers an
// integer.
func redisInt(t *testing.T, args ...string) int64 {
	t.Helper()
	v, err := standalone.Do(t.Context(), args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("%v: got %#v, want an integer", args, v)
	}
	return n
}

// oddSecond returns a per-second token bucket with a name no other test
// uses.
func oddSecond(count, burst int64) limit.Limit {
	return limit.Limit{Name: fmt.Sprint("s", rand.Uint32()), Count: count, Period: time.Second, Burst: burst}
}

// TestTokenBucketValue checks what a take under Redis's clock keeps for a
// token bucket: the credits left, the TTL it was written with and, once a
// request of two buckets has read the clock, the time of the take, with
// the key expiring exactly at that time plus the TTL.
func TestTokenBucketValue(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	l := oddSecond(10, 20) // 1000 credits a token, 10 credits a ms
	req := &limit.Request{Key: uniqueKey(t), Cost: 3, Limits: []limit.Limit{l}}
	rkey := s.RedisKey(req.Key, &l)

	take(t, s, req)
	// A bucket that did not exist: no clock read, the value says how long
	// it was written to live.
	if got, want := readBucket(t, rkey), (bucketState{17_000, 300, 0}); got != want {
		t.Errorf("after taking 3 of a fresh bucket: got %+v, want %+v", got, want)
	}
	if pttl := redisInt(t, "PTTL", rkey); pttl <= 0 || pttl > 300 {
		t.Errorf("PTTL %d, want 1..300", pttl)
	}

	// Two buckets that exist are written with the time of the take.
	m := oddSecond(100, 100)
	two := &limit.Request{Key: req.Key, Limits: []limit.Limit{l, m}}
	take(t, s, two)
	before := time.Now().UnixMilli()
	take(t, s, two)
	for _, lim := range []limit.Limit{l, m} {
		rkey := s.RedisKey(req.Key, &lim)
		st := readBucket(t, rkey)
		if st.last < before-1000 || st.last > time.Now().UnixMilli()+1000 {
			t.Errorf("%s: last take at %d ms, want about %d", lim.Name, st.last, before)
		}
		if at := redisInt(t, "PEXPIRETIME", rkey); at != st.last+st.ttl {
			t.Errorf("%s: expires at %d, want last %d + ttl %d", lim.Name, at, st.last, st.ttl)
		}
	}
}

// TestClockFromExpiry checks that a take reads the time since the last one
// from the key's expiry: moving the expiry 5.5s closer is, to the take,
// 5.5s gone by. For one bucket written without the time, and for two
// written with it, where the first bucket's expiry tells the clock for
// both. A token a second, so that the real time the test takes (well under
// half a second) changes no count.
func TestClockFromExpiry(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	ctx := t.Context()
	l := oddSecond(1, 10)
	m := oddSecond(1, 10)

	t.Run("WithoutTime", func(t *testing.T) {
		req := &limit.Request{Key: uniqueKey(t), Cost: 10, Limits: []limit.Limit{l}}
		rkey := s.RedisKey(req.Key, &l)
		if d := take(t, s, req); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("draining the bucket: got %+v", d)
		}
		if st := readBucket(t, rkey); st.last != 0 || st.ttl != 10_000 {
			t.Fatalf("drained bucket %+v, want ttl 10000 and no time", st)
		}
		redisInt(t, "PEXPIRE", rkey, fmt.Sprint(redisInt(t, "PTTL", rkey)-5_500))
		req.Cost = 1
		if d := take(t, s, req); !d.Allowed || d.Remaining != 4 {
			t.Errorf("5.5s after draining: got allowed %v remaining %d, want allowed with 4 left", d.Allowed, d.Remaining)
		}
		req.Cost = 5
		if d := take(t, s, req); d.Allowed || d.RetryAfter < 300*time.Millisecond || d.RetryAfter > 500*time.Millisecond {
			t.Errorf("5 more with 4.5 left: got allowed %v retry %v, want refused with about 500ms to wait", d.Allowed, d.RetryAfter)
		}
	})

	t.Run("WithTime", func(t *testing.T) {
		req := &limit.Request{Key: uniqueKey(t), Cost: 1, Limits: []limit.Limit{l, m}}
		take(t, s, req) // creates both
		req.Cost = 9
		if d := take(t, s, req); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("draining both buckets: got %+v", d)
		}
		lkey, mkey := s.RedisKey(req.Key, &l), s.RedisKey(req.Key, &m)
		ls, ms := readBucket(t, lkey), readBucket(t, mkey)
		if ls.last == 0 || ms.last == 0 {
			t.Fatalf("drained buckets %+v and %+v, want the time of the take in both", ls, ms)
		}
		// Only the first bucket's expiry moves: it tells the time, which the
		// second reads against its own last take.
		at := redisInt(t, "PEXPIRETIME", lkey)
		if v, err := standalone.Do(ctx, "PEXPIREAT", lkey, fmt.Sprint(at-5_500)); err != nil || v != int64(1) {
			t.Fatalf("PEXPIREAT: %v, %v", v, err)
		}
		req.Cost = 1
		d := take(t, s, req)
		if !d.Allowed || d.Remaining != 4 {
			t.Errorf("5.5s after draining: got allowed %v remaining %d, want allowed with 4 left in both", d.Allowed, d.Remaining)
		}
		if st := readBucket(t, mkey); st.credits < ms.credits+4_500 || st.credits > ms.credits+5_000 {
			t.Errorf("second bucket holds %d credits, want %d refilled by 5500 less the 1000 taken", st.credits, ms.credits)
		}
	})
}

// TestRefusedTakeLeavesNoBucket checks the all-or-nothing rule for a bucket
// that a take creates as it reads it (SET NX): when another limit refuses,
// the bucket is gone again, full, as if never asked.
func TestRefusedTakeLeavesNoBucket(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	key := uniqueKey(t)
	tight := oddSecond(1, 1)
	if d := take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{tight}}); !d.Allowed {
		t.Fatalf("first take of a fresh bucket refused: %+v", d)
	}
	// A spec no other test sends, so that the take creates it with SET NX
	// (it reads a spec whose buckets were recently found with GET).
	fresh := oddSecond(10, 1000+rand.Int64N(1_000_000))
	req := &limit.Request{Key: key, Limits: []limit.Limit{fresh, tight}}
	for range 3 {
		if d := take(t, s, req); d.Allowed {
			t.Fatalf("take with the tight limit drained: got %+v, want refused", d)
		}
		if n := redisInt(t, "EXISTS", s.RedisKey(key, &fresh)); n != 0 {
			t.Fatalf("EXISTS of the fresh bucket after a refused take: %d, want 0", n)
		}
	}
	if d := take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{fresh}}); !d.Allowed || d.Remaining != fresh.Burst-1 {
		t.Errorf("fresh bucket alone after the refusals: got %+v, want a full bucket (%d left)", d, fresh.Burst-1)
	}
}

// TestFailedTakeLeavesNoBucket checks the all-or-nothing rule when a take
// fails: a bucket it created while reading (SET NX) is gone again when a
// later limit's state turns out foreign, and the error says why.
func TestFailedTakeLeavesNoBucket(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	for _, c := range []struct {
		name  string
		limit limit.Limit
		set   []string // puts a foreign value under the second limit's key, which goes second
		want  string
	}{
		{"malformed bucket", oddSecond(10, 10), []string{"SET", "", "garbage"}, "sluice: malformed state"},
		{"window of another type", limit.Limit{Name: "w", Count: 10, Period: time.Second, Algorithm: limit.FixedWindow}, []string{"RPUSH", "", "x"}, "WRONGTYPE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := uniqueKey(t)
			// A spec no other test sends, so that the take creates it with
			// SET NX.
			fresh := oddSecond(10, 1000+rand.Int64N(1_000_000))
			c.set[1] = s.RedisKey(key, &c.limit)
			if _, err := standalone.Do(t.Context(), c.set...); err != nil {
				t.Fatal(err)
			}
			req := &limit.Request{Key: key, Limits: []limit.Limit{fresh, c.limit}}
			// The reply as Redis gave it (rueidis drops a leading "ERR "), and no
			// "ERR " added in front of it.
			if _, err := s.Take(t.Context(), req); !errors.Is(err, redisstore.ErrReply) || !strings.Contains(err.Error(), ": "+c.want) || strings.Contains(err.Error(), "ERR "+c.want) {
				t.Fatalf("take with a foreign second state: got %v, want ErrReply ending in the reply %q", err, c.want)
			}
			if n := redisInt(t, "EXISTS", s.RedisKey(key, &fresh)); n != 0 {
				t.Errorf("EXISTS of the bucket the failed take created: %d, want 0", n)
			}
		})
	}
}

// TestRedisClockMatchesModel runs random requests through a store on
// Redis's clock, the production path (the one-bucket path and the general
// one, SET NX and its undo, lease passes, the clock read from buckets'
// expiry or TIME, GCRA beside token buckets), and through memstore on a
// clock that stands still. Every limit refills a token in half an hour or
// more, so the second or so the test takes refills a thousandth of one:
// decisions, the limit reported, remaining tokens and grants must agree
// exactly, and waits within the test's own running time.
func TestRedisClockMatchesModel(t *testing.T) {
	// A token every 60, 61, 33.5 and 71 minutes: no two limits' waits for
	// the few tokens asked here are within minutes of each other, so the
	// limit a refusal reports is the same in both stores.
	pool := []limit.Limit{
		{Name: "a", Count: 1, Period: time.Hour, Burst: 5},
		{Name: "b", Count: 1, Period: 61 * time.Minute, Burst: 12},
		{Name: "c", Count: 2, Period: 67 * time.Minute, Burst: 30},
		{Name: "g", Count: 1, Period: 71 * time.Minute, Burst: 8, Algorithm: limit.GCRA},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, redisstore.Config{Addrs: tg.addrs()})
			frozen := time.Now()
			mem := memstore.New(memstore.Config{Now: func() time.Time { return frozen }})
			began := time.Now()
			rng := rand.New(rand.NewPCG(rand.Uint64(), 11))
			base := uniqueKey(t)
			for step := range 800 {
				var ls []limit.Limit
				for _, l := range pool {
					if rng.IntN(2) == 0 {
						ls = append(ls, l)
					}
				}
				if len(ls) == 0 {
					i := rng.IntN(len(pool))
					ls = pool[i : i+1]
				}
				// Some requests try a tighter limit out in shadow, under the
				// name of an enforced one, or have nothing but shadow
				// limits: the one-bucket path is then the general one.
				switch rng.IntN(4) {
				case 0:
					sh := ls[0]
					sh.Shadow, sh.Burst = true, 3
					ls = append(ls[:len(ls):len(ls)], sh)
				case 1:
					ls = slices.Clone(ls)
					for i := range ls {
						ls[i].Shadow = true
					}
				}
				req := &limit.Request{Key: fmt.Sprintf("%s-%d", base, rng.IntN(8)), Cost: 1 + rng.Int64N(3), Limits: ls}
				want := req.Cost
				if rng.IntN(3) == 0 {
					want += 1 + rng.Int64N(6)
				}
				gotN, got, err := s.TakeUpTo(ctx, req, want)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				wantN, model, err := mem.TakeUpTo(ctx, req, want)
				if err != nil {
					t.Fatal(err)
				}
				slack := time.Since(began) + time.Second
				near := func(a, b time.Duration) bool { return a == b || a >= 0 && b >= 0 && (a-b).Abs() <= slack }
				gs, ms := got.Shadow, model.Shadow
				if gotN != wantN || got.Allowed != model.Allowed || got.Index != model.Index || got.Remaining != model.Remaining ||
					!near(got.RetryAfter, model.RetryAfter) || !near(got.ResetAfter, model.ResetAfter) ||
					gs.Checked != ms.Checked || gs.Allowed != ms.Allowed || gs.Index != ms.Index || gs.Remaining != ms.Remaining ||
					!near(gs.RetryAfter, ms.RetryAfter) {
					t.Fatalf("step %d, %d to %d tokens of %v for %s: Redis granted %d, %+v; model granted %d, %+v",
						step, req.Cost, want, ls, req.Key, gotN, got, wantN, model)
				}
			}
		})
	}
}

// TestNodeErrorInAScript checks that a node-wide error raised inside the
// take, here OOM when a script (the form of servers without functions)
// first writes, reaches the caller as the node being unavailable, whether
// the one-bucket path or the general one met it.
func TestNodeErrorInAScript(t *testing.T) {
	srv := redistest.Standalone(t)
	s := newStore(t, redisstore.Config{Addrs: []string{srv.Addr()}})
	redisstore.UseScripts(s)
	if _, err := srv.Do(t.Context(), "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	for _, ls := range [][]limit.Limit{{oddSecond(10, 10)}, {oddSecond(10, 10), oddSecond(5, 5)}} {
		_, err := s.Take(t.Context(), &limit.Request{Key: uniqueKey(t), Limits: ls})
		if !errors.Is(err, redisstore.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("%d limits under maxmemory 1: got %v, want ErrUnavailable with OOM", len(ls), err)
		}
	}
}

// TestSlidingWindowClockFromExpiry checks that a take of one sliding window
// under Redis's clock tells the time from its key's expiry, which is its
// window's start plus two periods, rather than reading TIME: moving the
// expiry to half a period from now is, to the take, half a period into the
// next window, where the full window before weighs half. An expiry that
// cannot be the state's (none at all) is not trusted, and the take reads
// the clock: the same window, still full. An allowed take in the same
// window keeps the key's expiry.
func TestSlidingWindowClockFromExpiry(t *testing.T) {
	s := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	l := limit.Limit{Name: "w", Count: 10, Period: time.Minute, Algorithm: limit.SlidingWindow}
	req := &limit.Request{Key: uniqueKey(t), Cost: 10, Limits: []limit.Limit{l}}
	rkey := s.RedisKey(req.Key, &l)
	if d := take(t, s, req); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("filling the window: got %+v, want allowed with 0 left", d)
	}
	ws := readBucket(t, rkey).credits // the window's start, first of the three
	if at := redisInt(t, "PEXPIRETIME", rkey); at != ws+2*60_000 {
		t.Fatalf("expires at %d, want the window's start %d plus two periods", at, ws)
	}

	req.Cost = 1
	redisInt(t, "PERSIST", rkey)
	if d := take(t, s, req); d.Allowed {
		t.Errorf("without an expiry (Redis's clock, the same full window): got %+v, want refused", d)
	}
	redisInt(t, "PEXPIREAT", rkey, fmt.Sprint(ws+2*60_000))
	redisInt(t, "PEXPIRE", rkey, "30000")
	if d := take(t, s, req); !d.Allowed || d.Remaining != 4 {
		t.Errorf("expiry half a period away (half into the next window, 10 before weighing 5): got allowed %v remaining %d, want allowed with 4 left", d.Allowed, d.Remaining)
	}
	st := readBucket(t, rkey)
	if st.credits != ws+60_000 || st.ttl != 1 || st.last != 10 {
		t.Errorf("state after the take: window %d, %d taken, %d before; want %d, 1, 10", st.credits, st.ttl, st.last, ws+60_000)
	}
	if at := redisInt(t, "PEXPIRETIME", rkey); at != ws+3*60_000 {
		t.Errorf("expires at %d, want the new window's start %d plus two periods", at, ws+60_000)
	}

	// Another key, its expiry moved to read as half into its window: a take
	// there keeps it, where one written with PXAT would move it back.
	req = &limit.Request{Key: uniqueKey(t), Cost: 1, Limits: []limit.Limit{l}}
	rkey = s.RedisKey(req.Key, &l)
	take(t, s, req)
	redisInt(t, "PEXPIRE", rkey, "90000")
	at := redisInt(t, "PEXPIRETIME", rkey)
	if d := take(t, s, req); !d.Allowed || d.Remaining != 8 {
		t.Errorf("second take of the window: got allowed %v remaining %d, want allowed with 8 left", d.Allowed, d.Remaining)
	}
	if got := redisInt(t, "PEXPIRETIME", rkey); got != at {
		t.Errorf("after a take in the same window, expires at %d, want %d kept", got, at)
	}
}
