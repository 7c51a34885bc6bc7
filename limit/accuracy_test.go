package limit

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// accuracyKeys sets how many keys TestAccuracy simulates, ten minutes of
// traffic each. The default keeps the suite fast; the figures in
// docs/algorithms.md come from
//
//	go test ./limit -run TestAccuracy -v -accuracy.keys 4000
var accuracyKeys = flag.Int("accuracy.keys", 6, "keys TestAccuracy simulates, ten minutes each")

// tally is what one algorithm did with the trace, judged against the exact
// rolling window: the tokens the algorithm itself admitted in the last
// period.
type tally struct {
	requests, admitted int64
	worstWindow        int64 // most tokens admitted in any period
	// What a key idle until one second before a window boundary gets when
	// it then asks every millisecond for two minutes.
	burst2s, burstWorst int64 // admitted in the first two seconds, in any period
}

// estimate counts, in Cloudflare's terms, how often a windowed count of all
// requests (admitted or not) is on the other side of the limit from the
// exact rolling count of all requests.
type estimate struct {
	requests, slidingWrong, fixedWrong int64
}

// estimates keeps steady (Poisson) and bursty (on and off) keys apart: the
// sliding window counter assumes the previous window was spread evenly.
type estimates struct{ steady, bursty estimate }

// window is the admissions of the last period, oldest first: a queue of
// times and costs with a running sum.
type window struct {
	at, cost []int64
	head     int
	sum      int64
}

func (w *window) expire(before int64) {
	for w.head < len(w.at) && w.at[w.head] <= before {
		w.sum -= w.cost[w.head]
		w.head++
	}
	if w.head > 4096 && w.head*2 > len(w.at) {
		w.at, w.cost, w.head = append(w.at[:0], w.at[w.head:]...), append(w.cost[:0], w.cost[w.head:]...), 0
	}
}

func (w *window) add(at, cost int64) {
	w.at, w.cost = append(w.at, at), append(w.cost, cost)
	w.sum += cost
}

// trafficKey generates one key's request times for ten minutes: Poisson
// arrivals at a rate between a tenth of the limit and ten times it
// (log-uniform), and for half the keys switched on and off in bursts of a
// few seconds at three times that rate, as retry storms and batch jobs send.
func trafficKey(rng *rand.Rand, perMs float64, emit func(at int64)) (bursty bool) {
	const span = 10 * 60 * 1000
	rate := perMs * math.Exp(rng.Float64()*2*math.Log(10)-math.Log(10))
	bursty = rng.IntN(2) == 0
	on, switchAt := true, 0.0
	t := 0.0
	for t < span {
		r := rate
		if bursty {
			for t >= switchAt {
				on = !on
				switchAt += rng.ExpFloat64() * 3000
			}
			if !on {
				t = switchAt
				continue
			}
			r *= 3
		}
		t += rng.ExpFloat64() / r
		if t < span && (!bursty || t < switchAt) {
			emit(int64(t))
		}
	}
	return bursty
}

// TestAccuracy runs every algorithm on the same synthetic traffic, a limit
// of 1,000 a minute per key, and measures how far each strays from the
// exact rolling window: the tokens it admits beyond it, and the most it
// admits in any minute and any second. It also measures, in Cloudflare's
// terms, how often the sliding window counter's estimate of all requests
// in the last minute falls on the other side of the limit from the exact
// count. It checks what must hold on any traffic (the sliding log is exact,
// nothing passes twice the count in a minute) and prints the table
// docs/algorithms.md quotes.
func TestAccuracy(t *testing.T) {
	const count, period = 1000, int64(60_000)
	tallies := make([]tally, len(Algorithms))
	var est estimates
	rng := rand.New(rand.NewPCG(2026, 3))
	var arrivals []int64
	for range *accuracyKeys {
		arrivals = arrivals[:0]
		bursty := trafficKey(rng, count/float64(period), func(at int64) { arrivals = append(arrivals, int64(t0)+at) })
		if bursty {
			est.bursty.add(arrivals, count, period)
		} else {
			est.steady.add(arrivals, count, period)
		}
		for i, alg := range Algorithms {
			l := Limit{Name: "m", Count: count, Period: time.Duration(period) * time.Millisecond, Algorithm: alg}
			tallies[i].add(&l, arrivals)
		}
	}
	hammer := make([]int64, 0, 2*period)
	for ms := range 2 * period {
		hammer = append(hammer, int64(t0)+period-1000+ms)
	}
	for i, alg := range Algorithms {
		l := Limit{Name: "m", Count: count, Period: time.Duration(period) * time.Millisecond, Algorithm: alg}
		var probe tally
		probe.add(&l, hammer)
		tallies[i].burst2s, tallies[i].burstWorst = probe.burst2s, probe.worstWindow
	}
	var b strings.Builder
	requests := est.steady.requests + est.bursty.requests
	fmt.Fprintf(&b, "%d keys × 10 min at 1,000 a minute: %d requests\n", *accuracyKeys, requests)
	fmt.Fprintf(&b, "%-15s %10s %9s %12s   %s\n", "algorithm", "admitted", "vs-log", "worst-minute", "hammered from idle: first 2s, worst minute")
	exact := float64(tallies[len(Algorithms)-1].admitted)
	for i, alg := range Algorithms {
		tl := tallies[i]
		fmt.Fprintf(&b, "%-15s %10d %8.2f%% %12d   %d, %d\n", alg, tl.admitted, 100*float64(tl.admitted)/exact,
			tl.worstWindow, tl.burst2s, tl.burstWorst)
	}
	for _, c := range []struct {
		name string
		e    estimate
	}{{"steady", est.steady}, {"bursty", est.bursty}, {"all", estimate{requests, est.steady.slidingWrong + est.bursty.slidingWrong, est.steady.fixedWrong + est.bursty.fixedWrong}}} {
		fmt.Fprintf(&b, "%s keys, %d requests: the estimate of all requests is on the wrong side of the limit for %d (%.4f%%) by the sliding window counter, %d (%.4f%%) by the fixed window\n",
			c.name, c.e.requests, c.e.slidingWrong, 100*float64(c.e.slidingWrong)/float64(c.e.requests), c.e.fixedWrong, 100*float64(c.e.fixedWrong)/float64(c.e.requests))
	}
	t.Log("\n" + b.String())
	for i, alg := range Algorithms {
		tl := tallies[i]
		if tl.requests == 0 || tl.admitted == 0 {
			t.Fatalf("%s: %d requests, %d admitted: the traffic generator is broken", alg, tl.requests, tl.admitted)
		}
		if tl.worstWindow > 2*count {
			t.Errorf("%s: %d admitted in one minute, want at most twice the count", alg, tl.worstWindow)
		}
	}
	if log := tallies[len(Algorithms)-1]; log.worstWindow > count || log.burstWorst > count {
		t.Errorf("sliding log: worst minute %d, hammered %d: want at most %d", log.worstWindow, log.burstWorst, count)
	}
	if fw := tallies[3]; fw.burst2s != 2*count {
		t.Errorf("fixed window hammered across a boundary: %d in two seconds, want %d", fw.burst2s, 2*count)
	}
}

// add runs one key's arrivals, one token each, through limit l.
func (tl *tally) add(l *Limit, arrivals []int64) {
	var st State
	var minute window
	p := l.PeriodMillis()
	for _, now := range arrivals {
		minute.expire(now - p)
		o := Evaluate(l, &st, now, 1)
		tl.requests++
		if !o.Allowed {
			continue
		}
		st = o.Next
		tl.admitted++
		minute.add(now, 1)
		tl.worstWindow = max(tl.worstWindow, minute.sum)
		if now-arrivals[0] < 2000 {
			tl.burst2s++
		}
	}
}

// add counts one key's arrivals: at each, is the last period over the
// limit, by the exact count and by each windowed estimate?
func (e *estimate) add(arrivals []int64, count, p int64) {
	var exact window
	var ws, cur, prev int64 = math.MinInt64, 0, 0
	for _, now := range arrivals {
		exact.expire(now - p)
		exact.add(now, 1)
		switch w := windowStart(now, p); {
		case w == ws:
		case w == ws+p:
			ws, prev, cur = w, cur, 0
		default:
			ws, prev, cur = w, 0, 0
		}
		cur++
		over := exact.sum > count
		sliding := cur+ceilDiv(prev*(p-(now-ws)), p) > count
		e.requests++
		if sliding != over {
			e.slidingWrong++
		}
		if cur > count != over {
			e.fixedWrong++
		}
	}
}
