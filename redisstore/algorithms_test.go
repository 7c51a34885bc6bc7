package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
)

// edgeLimits are limits at the edges of what limit.Validate accepts, where
// Go's int64 and Lua's doubles would part first if any step were inexact.
var edgeLimits = []limit.Limit{
	{Count: 2047, Period: time.Second, Burst: 1, Algorithm: limit.GCRA},       // GCRA's finest time scale
	{Count: 7, Period: 999 * time.Millisecond, Algorithm: limit.GCRA},         // a rate that divides nothing
	{Count: 1_000_000_000, Period: time.Hour, Algorithm: limit.SlidingWindow}, // count × period near 2^52
	{Count: 2_000_000_000, Period: time.Hour, Burst: 2_400_000_000},           // burst × period near 2^53
	{Count: 1_000_000, Period: 24 * time.Hour, Algorithm: limit.FixedWindow},
	{Count: limit.MaxLogCount, Period: time.Second, Algorithm: limit.SlidingLog},
	{Count: 1<<52 - 1, Period: time.Millisecond, Burst: 1<<53 - 1},               // a quotient's a + b - 1 above 2^53
	{Count: 1<<53 - 1, Period: time.Millisecond, Algorithm: limit.SlidingWindow}, // two windows' counts above 2^53
	{Count: 1, Period: 366 * 24 * time.Hour, Algorithm: limit.SlidingWindow},     // the longest wait, limit.MaxWait
}

// randomLimit returns a small limit of algorithm alg, or now and then one of
// edgeLimits, named name.
func randomLimit(rng *rand.Rand, name string, alg limit.Algorithm) limit.Limit {
	if rng.IntN(8) == 0 {
		l := edgeLimits[rng.IntN(len(edgeLimits))]
		l.Name = name
		return l
	}
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute, time.Hour}
	l := limit.Limit{Name: name, Count: 1 + rng.Int64N(20), Period: periods[rng.IntN(len(periods))], Algorithm: alg}
	if rng.IntN(2) == 0 {
		l.Burst = 1 + rng.Int64N(40)
	}
	return l
}

// TestAlgorithmsMatchMemstore drives the same generated request sequences
// through the Redis store, the in-process store and limittest.Model (plain
// limit.Evaluate), one limit of each algorithm alone and then random mixes
// of one to three limits, and requires the same decision at every step.
// Times come from one fake clock that mostly moves by milliseconds and
// sometimes idles for hours; costs sometimes exceed every capacity.
//
// Half the runs also step the clock back now and then, to check that Lua
// and Go read a clock that steps back alike. Those compare with the Model
// only: the in-process store drops a state once its TTL has passed, as Redis
// does by its own clock in production, and a clock stepping back to before
// that expiry then finds nothing, where the Model and Redis under a test
// clock (which keeps states ten minutes longer) still find the state.
//
// Further runs change the rate (and with it a default burst) of a limit now
// and then, up and down, keeping its name, algorithm and period; for GCRA
// half the changes keep its unit (limit.Limit.Unit), so that its timestamp
// carries over, and the rest find another bucket. Requests with a limit
// other than GCRA compare with the Model only: a store keeps a state as
// long as the limit that wrote it needs it, and a lower rate or a higher
// burst may need it longer (see limit.Limit). GCRA's timestamp is the time
// the bucket is full under any limit that shares it, so there the
// in-process store must agree too.
func TestAlgorithmsMatchMemstore(t *testing.T) {
	type run struct {
		name   string
		seed   uint64
		mixed  bool
		back   bool // the clock sometimes steps back
		rates  bool // the rates sometimes change
		first  limit.Algorithm
		length int
	}
	var runs []run
	for i, alg := range limit.Algorithms {
		for s := range uint64(2) {
			runs = append(runs, run{fmt.Sprintf("%s/seed%d", alg, s), uint64(i)*10 + s, false, s == 1, false, alg, 300})
		}
	}
	for s := range uint64(6) {
		runs = append(runs, run{fmt.Sprintf("mixed/seed%d", s), 100 + s, true, s%2 == 1, false, limit.Algorithms[s%5], 300})
	}
	for s := range uint64(4) {
		runs = append(runs, run{fmt.Sprintf("gcra/rates/seed%d", s), 200 + s, false, s == 1, true, limit.GCRA, 400})
	}
	for s := range uint64(4) {
		runs = append(runs, run{fmt.Sprintf("mixed/rates/seed%d", s), 300 + s, true, s == 1, true, limit.Algorithms[s%5], 300})
	}
	for _, tg := range targets {
		for _, r := range runs {
			t.Run(tg.name+"/"+r.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(r.seed, 2026))
				limits := []limit.Limit{randomLimit(rng, "a", r.first)}
				if r.mixed {
					for i := range rng.IntN(3) {
						limits = append(limits, randomLimit(rng, string(rune('b'+i)), limit.Algorithms[rng.IntN(len(limit.Algorithms))]))
					}
				}
				clk := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(1000)) * time.Millisecond))
				red := newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: clk.Now})
				mem := memstore.New(memstore.Config{})
				model := limittest.NewModel()
				key := uniqueKey(t)
				for step := range r.length {
					if r.rates && rng.IntN(15) == 0 {
						i := rng.IntN(len(limits))
						l := limits[i]
						l.Count = 1 + rng.Int64N(2*l.Count+3)
						if u := limits[i].Unit(); u > 0 && rng.IntN(2) == 0 {
							// The largest count below it in the same unit.
							for l.Count > 1 && l.Unit() != u {
								l.Count--
							}
						}
						if l.Validate() == nil {
							limits[i] = l
						}
					}
					switch x := rng.IntN(100); {
					case x < 2 && r.back:
						clk.Advance(-time.Duration(1+rng.IntN(50)) * time.Millisecond)
					case x < 4:
						clk.Advance(time.Duration(1+rng.IntN(5)) * time.Hour)
					case x < 30:
					default:
						clk.Advance(time.Duration(rng.IntN(int(limits[0].Period.Milliseconds()/2+3))) * time.Millisecond)
					}
					cost := int64(1)
					if rng.IntN(4) == 0 {
						cost = 1 + rng.Int64N(2*limits[0].EffectiveBurst())
					}
					lo := rng.IntN(len(limits))
					req := &limit.Request{Key: key, Cost: cost, Limits: limits[lo : lo+1+rng.IntN(len(limits)-lo)]}
					now := clk.Now().UnixMilli()
					got, want := take(t, red, req), model.Take(now, req)
					if got != want {
						t.Fatalf("step %d (at %s, cost %d, %v): redis %+v, limit.Evaluate %+v",
							step, clk.Now().Format("15:04:05.000"), cost, req.Limits, got, want)
					}
					if m := withoutSource(mem.TakeAt(now, req)); !r.back && (!r.rates || allGCRA(req.Limits)) && m != got {
						t.Fatalf("step %d (at %s, cost %d, %v): redis %+v, memstore %+v",
							step, clk.Now().Format("15:04:05.000"), cost, req.Limits, got, m)
					}
				}
			})
		}
	}
}

// rawClient connects a plain client to the deployment, to look at what the
// store wrote.
func rawClient(t *testing.T, tg target) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: tg.addrs(), DisableCache: true})
	if err != nil {
		t.Fatalf("connect to %v: %v", tg.addrs(), err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestSlidingLogBoundedInRedis sends a key 100 times its sliding-log limit
// and checks the list under the key: never more than the limit's count of
// entries, and exactly the admitted tokens of the last period.
func TestSlidingLogBoundedInRedis(t *testing.T) {
	tests := []struct {
		count, cost int64
	}{{50, 1}, {60, 7}}
	for _, tg := range targets {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/count%d/cost%d", tg.name, tt.count, tt.cost), func(t *testing.T) {
				clk := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
				s := newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: clk.Now})
				raw := rawClient(t, tg)
				l := limit.Limit{Name: "s", Count: tt.count, Period: time.Second, Algorithm: limit.SlidingLog}
				req := &limit.Request{Key: uniqueKey(t), Cost: tt.cost, Limits: []limit.Limit{l}}
				redisKey := s.RedisKey(req.Key, &l)
				// 100 × count tokens asked for within two seconds.
				asks := 100 * tt.count / tt.cost
				var longest int64
				for i := range asks {
					clk.Advance(2 * time.Second / time.Duration(asks))
					take(t, s, req)
					if i%16 == 0 || i == asks-1 {
						n, err := raw.Do(t.Context(), raw.B().Llen().Key(redisKey).Build()).AsInt64()
						if err != nil {
							t.Fatalf("LLEN %s: %v", redisKey, err)
						}
						longest = max(longest, n)
					}
				}
				if longest > tt.count || longest < tt.count-tt.cost+1 {
					t.Errorf("longest list %d entries, want %d to %d (full, never more)", longest, tt.count-tt.cost+1, tt.count)
				}
			})
		}
	}
}

// allGCRA reports whether every limit of ls is a GCRA limit.
func allGCRA(ls []limit.Limit) bool {
	for i := range ls {
		if ls[i].Alg() != limit.GCRA {
			return false
		}
	}
	return true
}

// TestGCRAStateIsOneTimestamp checks what the script keeps for a GCRA limit:
// one integer, limit.Evaluate's TAT, under a key that ends in the limit's
// unit, and that a rate change in the same unit reads it as a time.
func TestGCRAStateIsOneTimestamp(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			s := newStore(t, redisstore.Config{Addrs: tg.addrs(), Now: func() time.Time { return now }})
			raw := rawClient(t, tg)
			key := uniqueKey(t)
			// 3 a second counts in thirds of a ms; 1 and 10 a second in ms.
			for _, l := range []limit.Limit{
				{Name: "s", Count: 3, Period: time.Second, Burst: 4, Algorithm: limit.GCRA},
				{Name: "s", Count: 1, Period: time.Second, Burst: 4, Algorithm: limit.GCRA},
				{Name: "s", Count: 10, Period: time.Second, Burst: 4, Algorithm: limit.GCRA},
			} {
				req := &limit.Request{Key: key, Cost: 2, Limits: []limit.Limit{l}}
				redisKey := s.RedisKey(req.Key, &l)
				if want := fmt.Sprintf(":%d", l.Unit()); !strings.HasSuffix(redisKey, want) {
					t.Errorf("%v: key %q, want it to end in its unit %q", l, redisKey, want)
				}
				var st limit.State
				if v, err := raw.Do(t.Context(), raw.B().Get().Key(redisKey).Build()).ToString(); err == nil {
					tat, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatalf("%v: value %q, want one integer", l, v)
					}
					st = limit.State{Exists: true, A: tat}
				}
				o := limit.Evaluate(&l, &st, now.UnixMilli(), 2)
				if d := take(t, s, req); d != limit.Decide([]limit.Outcome{o}) {
					t.Errorf("%v: got %+v, want %+v", l, d, limit.Decide([]limit.Outcome{o}))
				}
				v, err := raw.Do(t.Context(), raw.B().Get().Key(redisKey).Build()).ToString()
				if err != nil {
					t.Fatalf("GET %s: %v", redisKey, err)
				}
				if want := strconv.FormatInt(o.Next.A, 10); v != want {
					t.Errorf("%v: value %q, want the TAT %q alone", l, v, want)
				}
			}
		})
	}
}

// withoutSource is d as the models give it, which name no source.
func withoutSource(d limit.Decision) limit.Decision {
	d.Source = ""
	return d
}
