package regions

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/proctest"
)

// regionToken is region r's token, which its gateway gives the balancer
// in SLUICE_BALANCER_TOKEN; the balancer knows every region's from its
// --tokens file, as deployed, with an operator's for key look-ups.
func regionToken(r string) string { return "regions-test-token-" + r }

// opsToken is the operator's token, which reads a key's shares.
const opsToken = "regions-test-token-ops"

// tokensFile writes the balancer's --tokens file.
func tokensFile(t *testing.T) string {
	var b strings.Builder
	for _, r := range regionNames {
		fmt.Fprintf(&b, "- {name: %s-gateways, secret: %s, region: %s}\n", r, regionToken(r), r)
	}
	fmt.Fprintf(&b, "- {name: ops, secret: %s}\n", opsToken)
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// interval is the balancer's and the gateways' interval in these tests:
// 10 s in production.
const interval = 200 * time.Millisecond

// world is one test's deployment: a balancer and a gateway per region.
type world struct {
	t        *testing.T
	rules    string
	balancer *proctest.Process
	// balancerURL is what the gateways are given: the balancer's, or a
	// proxy's in front of it.
	balancerURL string
	stale       time.Duration
	gateways    []*proctest.Process // by region index
	// limits names, for a key of the tests, the store key and limit the
	// balancer shares; a key not in it is an API key's limit s.
	limits map[string][2]string
}

// rule is one key's limit in a test's rules file.
type rule struct {
	key         string
	rate, burst int
}

// newWorld writes the rules, starts the balancer and, unless proxy wraps
// its URL, points the gateways at it; then it starts a gateway per region.
func newWorld(t *testing.T, stale time.Duration, proxy func(string) string, rules ...rule) *world {
	t.Helper()
	var b strings.Builder
	b.WriteString("rules:\n  - scope: default\n    limits: [{name: s, rate: 100000, per: 1s}]\n")
	for _, r := range rules {
		fmt.Fprintf(&b, "  - scope: key\n    match: {key: %s}\n    limits: [{name: s, rate: %d, per: 1s, burst: %d}]\n", r.key, r.rate, r.burst)
	}
	return newWorldDoc(t, stale, proxy, b.String())
}

// newWorldDoc is newWorld with the rules file written as doc.
func newWorldDoc(t *testing.T, stale time.Duration, proxy func(string) string, doc string) *world {
	t.Helper()
	w := &world{t: t, stale: stale, gateways: make([]*proctest.Process, len(regionNames))}
	w.rules = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(w.rules, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	w.startBalancer()
	w.balancerURL = w.balancer.URL
	if proxy != nil {
		w.balancerURL = proxy(w.balancer.URL)
	}
	for i := range regionNames {
		w.startGateway(i)
	}
	return w
}

func (w *world) startBalancer() { w.balancer = startBalancer(w.t) }

// startBalancer starts a balancer process with the tests' interval, and
// extra flags.
func startBalancer(t *testing.T, extra ...string) *proctest.Process {
	args := append([]string{"balancer", "--listen", "127.0.0.1:0", "--regions", strings.Join(regionNames, ","),
		"--interval", interval.String(), "--poll-timeout", "1s", "--tokens", tokensFile(t)}, extra...)
	return sluice.Start(t, args...)
}

// startGateway starts region i's gateway on its Redis.
func (w *world) startGateway(i int) {
	w.gateways[i] = sluice.StartEnv(w.t, []string{"SLUICE_BALANCER_TOKEN=" + regionToken(regionNames[i])}, "gateway", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--rules", w.rules, "--redis", redises[i].Addr(), "--redis-timeout", "200ms",
		"--region", regionNames[i], "--gateway-id", regionNames[i]+"-1", "--regions", strings.Join(regionNames, ","),
		"--balancer-url", w.balancerURL, "--share-interval", interval.String(), "--share-stale", w.stale.String())
}

// shares asks the balancer for a key's shares of limit s, as fractions
// by region index; nil while the key is not balanced or the balancer has
// none yet.
func (w *world) shares(key string) []float64 {
	s, _ := w.sharesAt(key)
	return s
}

// sharesAt is shares with the version of the balancer's shares they are
// from.
func (w *world) sharesAt(key string) ([]float64, int64) {
	w.t.Helper()
	storeKey, lim := "k:"+key, "s"
	if p, ok := w.limits[key]; ok {
		storeKey, lim = p[0], p[1]
	}
	req, err := http.NewRequest(http.MethodGet, w.balancer.URL+balancer.KeyPath+storeKey, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	// The key look-up shows API keys: it asks for an operator's token.
	req.Header.Set("Authorization", "Bearer "+opsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0
	}
	defer resp.Body.Close()
	var ks balancer.KeyShares
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&ks) != nil || !ks.Balanced {
		return nil, 0
	}
	out := make([]float64, len(regionNames))
	for i, r := range regionNames {
		out[i] = ks.Limits[lim][r].Fraction
	}
	return out, ks.Version
}

// waitShares polls the balancer every 20 ms until cond holds for a key's
// shares, and returns how long that took and the version of the shares
// that met it; it fails the test after limit.
func (w *world) waitShares(key, what string, limit time.Duration, cond func([]float64) bool) (time.Duration, int64) {
	w.t.Helper()
	start := time.Now()
	for {
		if s, v := w.sharesAt(key); s != nil && cond(s) {
			return time.Since(start), v
		}
		if time.Since(start) > limit {
			w.t.Fatalf("%s: not within %v; shares of %s now %v", what, limit, key, w.shares(key))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSplit waits until a key's shares are within 0.03 of want, by
// region, and every gateway runs them; it returns how long the balancer
// took.
func (w *world) waitSplit(key string, want []float64) time.Duration {
	w.t.Helper()
	took, v := w.waitShares(key, fmt.Sprintf("shares to converge to %v", want), 20*time.Second, func(s []float64) bool {
		for i := range s {
			if math.Abs(s[i]-want[i]) > 0.03 {
				return false
			}
		}
		return true
	})
	for i := range regionNames {
		w.waitGateway(i, float64(v))
	}
	return took
}

// metric returns the sum of a metric's samples in a process's /metrics.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for line := range strings.Lines(string(body)) {
		f := strings.Fields(line)
		if len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			var v float64
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// hit is one request's outcome.
type hit struct {
	sent, done time.Time
	region     int
	status     int
}

// traffic sends requests for keys and records every answer. Its methods
// are safe for concurrent use.
type traffic struct {
	client *http.Client
	mu     sync.Mutex
	hits   map[string][]hit // by key; guarded by mu
	wg     sync.WaitGroup
}

func newTraffic() *traffic {
	return &traffic{client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		hits: map[string][]hit{}}
}

// flow sends rps requests a second for key to the gateway at url (region
// i) until stop is closed. Each request runs on its own goroutine, so a
// slow answer does not slow the flow.
func (tr *traffic) flow(stop <-chan struct{}, url func() string, i int, key string, rps int) {
	tr.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rps))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			u := url()
			tr.wg.Go(func() { tr.send(u, i, key) })
		}
	})
}

func (tr *traffic) send(url string, i int, key string) {
	req, err := http.NewRequest(http.MethodGet, url+"/v1/orders", nil)
	if err != nil {
		return
	}
	req.Header.Set("X-API-Key", key)
	h := hit{sent: time.Now(), region: i}
	resp, err := tr.client.Do(req)
	h.done = time.Now()
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.status = resp.StatusCode
	}
	tr.mu.Lock()
	tr.hits[key] = append(tr.hits[key], h)
	tr.mu.Unlock()
}

// wait waits for every flow and request to end.
func (tr *traffic) wait() { tr.wg.Wait() }

// of returns a key's hits, sorted by when they were sent.
func (tr *traffic) of(key string) []hit {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	hs := slices.Clone(tr.hits[key])
	slices.SortFunc(hs, func(a, b hit) int { return a.sent.Compare(b.sent) })
	return hs
}

// admitted counts the 200s among hits sent in [from, to), in region i or
// any region when i < 0.
func admitted(hs []hit, i int, from, to time.Time) int {
	n := 0
	for _, h := range hs {
		if h.status == http.StatusOK && (i < 0 || h.region == i) && !h.sent.Before(from) && h.sent.Before(to) {
			n++
		}
	}
	return n
}

// checkGlobal checks that the key's admitted requests, across regions,
// never exceed burst + rate × elapsed + tolerance: at every answer, the
// 200s answered by then against the time since the first request was sent
// (admission lies between sending and answering, so this can only
// undercount what was admitted by then and overcount the time). It
// returns the largest excess over burst + rate × elapsed (negative when
// always under).
func checkGlobal(t *testing.T, hs []hit, rate, burst, tolerance float64) float64 {
	t.Helper()
	if len(hs) == 0 {
		t.Fatal("no requests sent")
	}
	start := hs[0].sent
	var done []time.Time
	for _, h := range hs {
		if h.status == http.StatusOK {
			done = append(done, h.done)
		}
	}
	slices.SortFunc(done, func(a, b time.Time) int { return a.Compare(b) })
	worst := -burst
	for n, at := range done {
		allowance := burst + rate*at.Sub(start).Seconds()
		worst = max(worst, float64(n+1)-allowance)
		if float64(n+1) > allowance+tolerance {
			t.Errorf("%d admitted after %v: above the global allowance %.1f plus tolerance %.0f", n+1, at.Sub(start), allowance, tolerance)
			return worst
		}
	}
	return worst
}

// statuses counts hits by status, for messages.
func statuses(hs []hit) map[int]int {
	m := map[int]int{}
	for _, h := range hs {
		m[h.status]++
	}
	return m
}

// delayProxy forwards TCP connections to the server at url, delivering
// every byte delay after it arrived in either direction, and returns the
// proxy's URL. The test's cleanup stops it.
func delayProxy(t *testing.T, url string, delay time.Duration) string {
	t.Helper()
	target := strings.TrimPrefix(url, "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				var pipes sync.WaitGroup
				pipes.Go(func() { delayCopy(u, c, delay); u.Close(); c.Close() })
				pipes.Go(func() { delayCopy(c, u, delay); u.Close(); c.Close() })
				pipes.Wait()
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// delayCopy copies src to dst, each chunk delay after it was read.
func delayCopy(dst io.Writer, src io.Reader, delay time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 1024)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				ch <- chunk{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			for range ch {
			}
			return
		}
	}
}

// waitGateway waits until region i's gateway runs shares of version at
// least v.
func (w *world) waitGateway(i int, v float64) {
	w.t.Helper()
	start := time.Now()
	for metric(w.t, w.gateways[i].MetricsURL, "sluice_region_share_version") < v {
		if time.Since(start) > 20*time.Second {
			w.t.Fatalf("%s's gateway still runs shares older than version %.0f", regionNames[i], v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
