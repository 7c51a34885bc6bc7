// Package balancer is the quota balancer that lets several regions enforce
// one global limit, each on its own store: every interval each region's
// gateways report how much of their busiest keys' limits they asked for,
// and the balancer gives each region a share of each such limit in
// proportion to that traffic, with a small minimum per region, shares of
// one limit adding up to at most the whole. Gateways fetch their region's
// shares with a long poll and swap them into a share.Store.
//
// This package is the decision and the words both sides use: [Core], a
// deterministic state machine (reports and time go in, shares come out, no
// I/O and no clock), and the wire protocol ([Report], [Shares], the
// paths). internal/balancersvc serves a Core over HTTP and runs the
// rebalance loop; internal/sharesync is the gateway's side. docs/regions.md
// describes the share rule, the default split and what happens when the
// balancer or a region fails.
package balancer

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// The balancer's paths.
const (
	// ReportPath takes a POSTed [Report].
	ReportPath = "/v1/report"
	// SharesPath answers GET ?region=R&after=VERSION&wait=DURATION with
	// the region's [Shares]: at once when the version in force differs
	// from VERSION, else when it changes or wait passes (304 Not
	// Modified). 503 means the balancer has no shares to give yet: it
	// gathered its first reports for all of wait, the region is counted
	// down until its gateways report (its shares would all be 0), or it is
	// a standby while its primary answers (with StandbyHeader).
	SharesPath = "/v1/shares"
	// KeyPath answers GET KeyPath + KEY with the [KeyShares] of a store
	// key, such as /v1/keys/k:abc.
	KeyPath = "/v1/keys/"
)

// StandbyHeader is set to "1" on a standby's 503 answers: the client
// should ask another balancer, while any other 503 (no shares yet) means
// wait for this one.
const StandbyHeader = "Sluice-Standby"

// Report is what one gateway asked of its region's shares over one span.
type Report struct {
	// Region is the gateway's region: one of the balancer's regions.
	Region string `json:"region"`
	// Gateway identifies the gateway within its region; a newer report
	// replaces its last, and no other gateway's. A token bound to one
	// gateway may report as that gateway only.
	Gateway string `json:"gateway"`
	// SpanMillis is how long the counts took to gather.
	SpanMillis int64 `json:"span_ms"`
	// SentMillis is when the gateway sent the report, in Unix milliseconds
	// by its clock: reports are sent without waiting for each other, and
	// one that arrives after a later one from the same gateway is dropped
	// (CoreConfig.MaxSkew says how a clock ahead is treated). Zero means
	// unknown: the report is taken as the newest.
	SentMillis int64 `json:"sent_ms,omitempty"`
	// Total is how many tokens the gateway's requests asked for, every
	// key included. The balancer cuts it to its MaxGatewayRate over the
	// span, and each pair's counts to it.
	Total int64 `json:"total"`
	// Pairs are the busiest limits of keys.
	Pairs []PairReport `json:"pairs,omitempty"`
}

// PairReport is one limit of one key in a Report.
type PairReport struct {
	Key      string `json:"key"`
	Limit    string `json:"limit"`
	Asked    int64  `json:"asked"`
	Admitted int64  `json:"admitted"`
}

// MaxPairsPerReport bounds a report, so one gateway cannot make the
// balancer hold an unbounded number of keys: twice the default MaxKeys and
// the client's Top. A Client trims its report to it.
const MaxPairsPerReport = 20_000

// MaxKeyLen is the longest store key a report may name: an API key of
// rules.MaxKeyLen bytes with its store prefix ("k:", "ip:").
const MaxKeyLen = rules.MaxKeyLen + 16

// MaxReportBytes bounds a report's body: MaxPairsPerReport pairs of the
// longest keys and limit names fit, with room to spare. A larger body is
// refused with 413.
const MaxReportBytes = 16 << 20

// Validate reports the first thing wrong with r.
func (r *Report) Validate() error {
	switch {
	case r.Gateway == "" || len(r.Gateway) > 128:
		return fmt.Errorf("report: gateway %q: want 1 to 128 bytes", r.Gateway)
	case r.SpanMillis <= 0:
		return fmt.Errorf("report from %q: span %dms must be positive", r.Gateway, r.SpanMillis)
	case r.Total < 0:
		return fmt.Errorf("report from %q: total %d is negative", r.Gateway, r.Total)
	case len(r.Pairs) > MaxPairsPerReport:
		return fmt.Errorf("report from %q: %d pairs, more than %d", r.Gateway, len(r.Pairs), MaxPairsPerReport)
	}
	for _, p := range r.Pairs {
		if len(p.Key) > MaxKeyLen {
			return fmt.Errorf("report from %q: key %q... is %d bytes, longer than %d", r.Gateway, p.Key[:32], len(p.Key), MaxKeyLen)
		}
		// The same rule as a limit's own, without its rate.
		if err := (&limit.Limit{Name: p.Limit, Count: 1, Period: time.Second}).Validate(); err != nil {
			return fmt.Errorf("report from %q: key %q: %w", r.Gateway, p.Key, err)
		}
		if p.Key == "" || p.Limit == "" || p.Asked < 0 || p.Admitted < 0 || p.Admitted > p.Asked {
			return fmt.Errorf("report from %q: pair %q %q: want a key, a limit and 0 ≤ admitted %d ≤ asked %d",
				r.Gateway, p.Key, p.Limit, p.Admitted, p.Asked)
		}
		if !utf8.ValidString(p.Key) {
			return fmt.Errorf("report from %q: key %q is not UTF-8", r.Gateway, p.Key)
		}
	}
	return nil
}

// Shares is one region's shares, the body of a 200 answer from SharesPath.
// Shares are in parts per million of each limit (share.Whole).
type Shares struct {
	// Version orders the balancer's tables; it changes with every new one.
	Version int64 `json:"version"`
	// Region is whose shares these are.
	Region string `json:"region"`
	// Default is the region's share of every limit not in Shares.
	Default uint32 `json:"default"`
	// Shares are the region's shares of the busy keys' limits.
	Shares []PairShare `json:"shares,omitempty"`
}

// PairShare is a region's share of one limit of one key.
type PairShare struct {
	Key   string `json:"key"`
	Limit string `json:"limit"`
	Share uint32 `json:"share"`
}

// KeyShares is what the balancer gives each region of one key's limits:
// the body of KeyPath.
type KeyShares struct {
	Key     string `json:"key"`
	Version int64  `json:"version"`
	// Balanced is false when no region reported the key as busy: every
	// region then applies its default share, listed in Defaults.
	Balanced bool `json:"balanced"`
	// Limits maps each of the key's busy limits to each region's share.
	Limits map[string]map[string]RegionShare `json:"limits,omitempty"`
	// Defaults are each region's share of limits not in Limits.
	Defaults map[string]RegionShare `json:"defaults"`
	// Up says which regions reported recently enough to count.
	Up map[string]bool `json:"up"`
}

// RegionShare is one region's share of one limit, with the traffic it was
// set from.
type RegionShare struct {
	// Share is in parts per million of the limit.
	Share uint32 `json:"share"`
	// Fraction is Share as a fraction, for reading.
	Fraction float64 `json:"fraction"`
	// Demand is the tokens per second the region's gateways asked for.
	Demand float64 `json:"demand"`
}
