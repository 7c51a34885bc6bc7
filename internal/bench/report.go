package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a fleet run measured: one ScenarioResult per scenario,
// each with one ModeResult per mode, all on the same traffic. It is the
// JSON file a run writes and what the HTML report draws.
type Report struct {
	Started  time.Time `json:"started"`
	Target   string    `json:"target"`   // the Redis the run used
	Gateways int       `json:"gateways"` // virtual gateways, round-robin
	Workers  int       `json:"workers"`
	Seconds  float64   `json:"seconds"` // each mode's run of each scenario
	Rate     float64   `json:"rate"`    // requests a second offered
	Command  string    `json:"command,omitempty"`
	// MaxErrorRate is the share of failed requests past which the run fails.
	MaxErrorRate float64          `json:"max_error_rate"`
	Scenarios    []ScenarioResult `json:"scenarios"`
}

// ScenarioResult is one scenario's figures in every mode.
type ScenarioResult struct {
	Name  string       `json:"name"`
	About string       `json:"about"`
	Claim string       `json:"claim"`
	Modes []ModeResult `json:"modes"`
}

// ModeResult is one mode's run of one scenario.
type ModeResult struct {
	Mode     Mode    `json:"mode"`
	Requests int64   `json:"requests"`
	Admitted int64   `json:"admitted"`
	Exact    int64   `json:"exact"` // what an exact limiter would have admitted of the same requests
	Seconds  float64 `json:"seconds"`
	// Throughput is decisions a second; Offered what the scenario asked.
	Throughput float64 `json:"throughput"`
	Offered    float64 `json:"offered"`
	// OverPct and UnderPct sum, over keys, admissions above and below the
	// exact allowance, as a percentage of the exact allowance.
	OverPct  float64 `json:"over_pct"`
	UnderPct float64 `json:"under_pct"`
	// RedisCalls is the limiter scripts Redis ran (INFO commandstats:
	// FCALL, EVALSHA, EVAL), leases' batches included.
	RedisCalls      int64   `json:"redis_calls"`
	CallsPerRequest float64 `json:"calls_per_request"`
	// Latency percentiles of one decision, in microseconds.
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	P999us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`
	// Sources counts answers by where they came from (limit.Source).
	Sources map[string]int64 `json:"sources"`
	// Errors counts failed requests by kind; FirstErrors has one message
	// of each kind.
	Errors      map[string]int64  `json:"errors"`
	FirstErrors map[string]string `json:"first_errors,omitempty"`
	// Keys are the most-requested keys' figures, focus key first.
	Keys     []KeyResult `json:"keys"`
	Timeline Timeline    `json:"timeline"`
	Events   []EventMark `json:"events,omitempty"`
	// Window is the focus key during the first event's span, when the
	// scenario has events.
	Window *Window `json:"window,omitempty"`
}

// Window is the focus key's admissions during a fault or after a rule
// change: Ratio is its admitted rate over its limit's rate, from From to
// To seconds into the run (whole bins only).
type Window struct {
	What  string  `json:"what"`
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Ratio float64 `json:"ratio"`
}

// LocalPct is the share of answers, in percent, made without Redis: the
// local fallback, fail-closed refusals and shed requests. Outside a fault
// it says Redis was judged down anyway (a Redis starved of CPU).
func (m *ModeResult) LocalPct() float64 {
	var n int64
	for _, src := range []string{"local-fallback", "fail-closed", "shed"} {
		n += m.Sources[src]
	}
	return pct(n, m.Requests)
}

// ErrorCount is the number of failed requests.
func (m *ModeResult) ErrorCount() int64 {
	var n int64
	for _, c := range m.Errors {
		n += c
	}
	return n
}

// KeyResult is one key's admissions against its exact allowance.
type KeyResult struct {
	Key      string  `json:"key"`
	Limit    string  `json:"limit"`
	Offered  int64   `json:"offered"`
	Admitted int64   `json:"admitted"`
	Exact    int64   `json:"exact"`
	OverPct  float64 `json:"over_pct"` // (admitted - exact) / exact, signed
}

// Timeline is the run in bins of BinSeconds; each series holds rates a
// second per bin.
type Timeline struct {
	BinSeconds float64 `json:"bin_seconds"`
	// FocusAdmitted and FocusLimit are the focus key's admissions and its
	// limit's rate.
	FocusAdmitted []float64 `json:"focus_admitted"`
	FocusLimit    []float64 `json:"focus_limit"`
	// Admitted and Requests are over every key.
	Admitted []float64 `json:"admitted"`
	Requests []float64 `json:"requests"`
	// Calls is Redis script calls a second.
	Calls []float64 `json:"calls"`
	// Local is answers made without Redis (local fallback, fail-closed,
	// shed); Errors failed requests.
	Local  []float64 `json:"local"`
	Errors []float64 `json:"errors"`
}

// EventMark is an event as it happened: when, and what.
type EventMark struct {
	At   float64 `json:"at"` // seconds into the run
	What string  `json:"what"`
}

// Requests is the requests of every scenario and mode.
func (r *Report) Requests() (requests, errors int64) {
	for _, s := range r.Scenarios {
		for _, m := range s.Modes {
			requests += m.Requests
			errors += m.ErrorCount()
		}
	}
	return requests, errors
}

// Check fails when failed requests pass MaxErrorRate, naming the kinds.
func (r *Report) Check() error {
	req, errs := r.Requests()
	if req == 0 {
		return fmt.Errorf("no requests were made")
	}
	if rate := float64(errs) / float64(req); rate > r.MaxErrorRate {
		kinds := map[string]int64{}
		for _, s := range r.Scenarios {
			for _, m := range s.Modes {
				for k, n := range m.Errors {
					kinds[k] += n
				}
			}
		}
		var b strings.Builder
		for _, k := range sortedKeys(kinds) {
			fmt.Fprintf(&b, " %s=%d", k, kinds[k])
		}
		return fmt.Errorf("%d of %d requests failed (%.4f%%, above --max-error-rate %.4f%%):%s",
			errs, req, 100*rate, 100*r.MaxErrorRate, b.String())
	}
	return nil
}

// WriteTable writes the summary table: one row per scenario and mode.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\trequests\tthroughput/s\tadmitted\tover %\tunder %\tfocus key %\tin window\tcalls/req\tlocal %\tp50\tp99\tp99.9\terrors\t")
	for _, s := range r.Scenarios {
		for _, m := range s.Modes {
			focus := "-"
			if len(m.Keys) > 0 {
				focus = fmt.Sprintf("%+.1f", m.Keys[0].OverPct)
			}
			window := "-"
			if m.Window != nil {
				window = fmt.Sprintf("%.2fx limit", m.Window.Ratio)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%d\t%.2f\t%.2f\t%s\t%s\t%.3f\t%.1f\t%s\t%s\t%s\t%d\t\n",
				s.Name, m.Mode, m.Requests, m.Throughput, m.Admitted, m.OverPct, m.UnderPct, focus, window,
				m.CallsPerRequest, m.LocalPct(), us(m.P50us), us(m.P99us), us(m.P999us), m.ErrorCount())
		}
	}
	return tw.Flush()
}

func us(v float64) string {
	return (time.Duration(v * float64(time.Microsecond))).Round(time.Microsecond).String()
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
