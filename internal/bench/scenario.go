package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Scenario is one kind of traffic a fleet run drives: streams of requests
// with their limits, and events at set points of the run (a fault, a rule
// change). Every mode of a run gets the same traffic.
type Scenario struct {
	// Name selects the scenario (--scenario).
	Name string
	// About says what the traffic is, in one sentence.
	About string
	// Claim is what the reference design says this traffic should cost or
	// admit, for the report to put beside the figures.
	Claim string
	// Streams are the traffic. The first stream's first key is the focus
	// key the charts follow.
	Streams []Stream
	// Events happen at fractions of the run.
	Events []Event
	// Regions, when set, splits the gateways evenly between these regions,
	// each counting in its own keyspace (a Redis of its own, in effect),
	// with a quota balancer in this process moving each region's share of
	// every limit after its traffic. The focus key's traffic goes to the
	// first region's gateways until a MoveTraffic event.
	Regions []string
	// Needs says which servers the scenario must have started itself:
	// "" (any Redis), "standalone" (a server the run may pause) or
	// "cluster" (a cluster whose primary it may kill).
	Needs string
}

// Stream is traffic at a fixed rate a second, over Keys keys with the same
// limit: evenly, or with Zipf popularity (the first key the most popular).
type Stream struct {
	Name  string
	Keys  int
	Rate  float64 // requests a second offered, over all the stream's keys
	Zipf  float64 // the Zipf exponent s, above 1; zero means keys are picked evenly
	Limit limit.Limit
}

// EventKind names what an Event does.
type EventKind string

// The events a scenario can schedule.
const (
	// PauseRedis freezes the Redis server (SIGSTOP) the key lives on.
	PauseRedis EventKind = "pause"
	// ResumeRedis resumes it (SIGCONT).
	ResumeRedis EventKind = "resume"
	// KillPrimary kills (SIGKILL) the cluster primary holding the focus
	// key; its replica takes over when the cluster fails it over.
	KillPrimary EventKind = "kill-primary"
	// LowerLimit divides every stream's limit by Factor.
	LowerLimit EventKind = "lower-limit"
	// MoveTraffic sends the traffic to the region numbered To.
	MoveTraffic EventKind = "move-traffic"
)

// Event is something a scenario does at At (a fraction of the run, 0 to 1).
type Event struct {
	At     float64
	Kind   EventKind
	Factor int64 // LowerLimit: the divisor
	To     int   // MoveTraffic: the region, an index in Scenario.Regions
}

// Scenarios returns the built-in scenarios, each offering about rate
// requests a second in total, in the order the report shows them.
func Scenarios(rate float64) []Scenario {
	per := func(count int64) limit.Limit {
		return limit.Limit{Name: "s", Count: count, Period: time.Second, Burst: count}
	}
	// The fault scenarios spread the rate over 20 keys, each at twice its
	// limit.
	fault := max(1, int64(rate/40))
	return []Scenario{
		{
			Name:  "steady",
			About: "100 keys with Zipf popularity (s=1.1), each limited to a tenth of the total rate: the two busiest keys over their limit, most far under",
			Claim: "about one Redis call per request without leases, about ten times fewer with them; at most about 1% over the limit",
			Streams: []Stream{{Name: "zipf", Keys: 100, Rate: rate, Zipf: 1.1,
				Limit: per(max(1, int64(rate/10)))}},
		},
		{
			Name:  "hot",
			About: "one hot tenant sending 99% of the traffic, 50 times a quiet key's limit and a quarter over its own large limit, beside the quiet key at half of its limit",
			Claim: "a busy key costs about one Redis call per lease batch (its share of 100 ms of its limit), never over; the quiet key is exact and untouched",
			Streams: []Stream{
				{Name: "hot", Keys: 1, Rate: rate * 0.99, Limit: per(max(1, int64(rate*0.99*0.8)))},
				{Name: "quiet", Keys: 1, Rate: rate * 0.01, Limit: per(max(1, int64(rate*0.02)))},
			},
		},
		{
			Name:    "storm",
			About:   "a retry storm: one key at 300 times its limit",
			Claim:   "with the refusal cache the storm costs Redis thousands of calls, not hundreds of thousands; never over the limit",
			Streams: []Stream{{Name: "storm", Keys: 1, Rate: rate, Limit: per(max(1, int64(rate/300)))}},
		},
		{
			Name:    "pause",
			About:   "20 keys at twice their limit while the Redis server is frozen (SIGSTOP) from 30% to 60% of the run",
			Claim:   "during the outage each gateway limits locally at slack/N of each limit: about twice the limit fleet-wide; back to the limit after",
			Streams: []Stream{{Name: "keys", Keys: 20, Rate: rate, Limit: per(fault)}},
			Events:  []Event{{At: 0.3, Kind: PauseRedis}, {At: 0.6, Kind: ResumeRedis}},
			Needs:   "standalone",
		},
		{
			Name:    "outage",
			About:   "20 keys at twice their limit on a 3-primary cluster; the primary of the focus key is killed at 30% and its replica takes over",
			Claim:   "keys on the dead shard are limited locally (about twice the limit) until failover; other shards are untouched",
			Streams: []Stream{{Name: "keys", Keys: 20, Rate: rate, Limit: per(fault)}},
			Events:  []Event{{At: 0.3, Kind: KillPrimary}},
			Needs:   "cluster",
		},
		{
			Name: "regions",
			About: "one key at twice its global limit from two regions' gateways, all of it in east until 40% of the run, then all in west; " +
				"a quota balancer in this process rebalances every 250 ms (the design's 10 s, scaled down)",
			Claim:   "when traffic moves between regions the key is held under its global limit until the next rebalance (about 10 s at the design's interval), never over",
			Streams: []Stream{{Name: "roamer", Keys: 1, Rate: rate, Limit: per(max(1, int64(rate/2)))}},
			Events:  []Event{{At: 0.4, Kind: MoveTraffic, To: 1}},
			Regions: []string{"east", "west"},
		},
		{
			Name:    "lower",
			About:   "20 keys at twice their limit; the limit is lowered to a quarter at half the run",
			Claim:   "the new limit holds from the change on (a token bucket keeps its state: what was left of the burst is spent first)",
			Streams: []Stream{{Name: "keys", Keys: 20, Rate: rate, Limit: per(fault)}},
			Events:  []Event{{At: 0.5, Kind: LowerLimit, Factor: 4}},
		},
	}
}

// SelectScenarios returns the scenarios named in names (comma-separated;
// "all" or empty for every one), in the order given.
func SelectScenarios(all []Scenario, names string) ([]Scenario, error) {
	if names == "" || names == "all" {
		return all, nil
	}
	var out []Scenario
	for name := range strings.SplitSeq(names, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(all, func(s Scenario) bool { return s.Name == name })
		if i < 0 {
			known := make([]string, len(all))
			for j, s := range all {
				known[j] = s.Name
			}
			return nil, fmt.Errorf("unknown scenario %q (want one of %s, or all)", name, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// traffic is a scenario's streams flattened: every key, its stream, and how
// to draw the next key the way the scenario's popularity says.
type traffic struct {
	keys   []string  // request keys, focus key first
	stream []int     // each key's stream
	first  []int     // each stream's first key
	cum    []float64 // cumulative share of the rate per stream
	rate   float64
	s      []Stream
}

func newTraffic(sc Scenario, prefix string) (*traffic, error) {
	t := &traffic{s: sc.Streams}
	for i, st := range sc.Streams {
		if st.Keys < 1 || !(st.Rate > 0) {
			return nil, fmt.Errorf("scenario %s: stream %s has %d keys at %v a second: want at least one key and a positive rate", sc.Name, st.Name, st.Keys, st.Rate)
		}
		if err := st.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("scenario %s: stream %s: %w", sc.Name, st.Name, err)
		}
		t.first = append(t.first, len(t.keys))
		for k := range st.Keys {
			t.keys = append(t.keys, fmt.Sprintf("k:%s%s-%d", prefix, st.Name, k))
			t.stream = append(t.stream, i)
		}
		t.rate += st.Rate
		t.cum = append(t.cum, t.rate)
	}
	if len(t.keys) == 0 {
		return nil, fmt.Errorf("scenario %s has no traffic", sc.Name)
	}
	return t, nil
}

// picker draws keys for one worker; each worker's sequence depends only on
// the seed and the worker, so every mode of a run gets the same traffic.
type picker struct {
	t    *traffic
	rng  *rand.Rand
	zipf []*rand.Zipf
}

func (t *traffic) picker(seed uint64, worker int) *picker {
	p := &picker{t: t, rng: rand.New(rand.NewPCG(seed, uint64(worker)))}
	for _, st := range t.s {
		var z *rand.Zipf
		if st.Zipf > 1 && st.Keys > 1 {
			z = rand.NewZipf(p.rng, st.Zipf, 1, uint64(st.Keys-1))
		}
		p.zipf = append(p.zipf, z)
	}
	return p
}

// next returns the index of the next request's key.
func (p *picker) next() int {
	x := p.rng.Float64() * p.t.rate
	s, _ := slices.BinarySearch(p.t.cum, x)
	s = min(s, len(p.t.cum)-1)
	st := p.t.s[s]
	switch {
	case p.zipf[s] != nil:
		return p.t.first[s] + int(p.zipf[s].Uint64())
	case st.Keys > 1:
		return p.t.first[s] + p.rng.IntN(st.Keys)
	}
	return p.t.first[s]
}
