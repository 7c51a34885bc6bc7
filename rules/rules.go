// Package rules describes which limits apply to a request: the rules file
// (or the rules service's snapshot), its validation, and the resolution of
// one request's identity and endpoint to the limits a store must check.
//
// A [Set] is immutable once compiled; a gateway swaps whole sets, so a
// request never sees half of a rule change.
package rules

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limit"
)

// Scope says what a rule matches on.
type Scope string

// The scopes a rule can have, from least to most specific.
const (
	ScopeDefault  Scope = "default"  // every request with an API key
	ScopeIP       Scope = "ip"       // requests without an API key, by client address
	ScopeEndpoint Scope = "endpoint" // every request to one endpoint
	ScopePlan     Scope = "plan"     // keys on one plan, optionally on one endpoint
	ScopeKey      Scope = "key"      // one API key: an override
	// ScopeOrg limits the sum of every key of one organization (the key
	// directory's org), beside each key's own limits; see [Set.Resolve].
	ScopeOrg Scope = "org"
)

// Mode says whether a rule refuses.
type Mode string

// Rule modes.
const (
	Enforce Mode = "enforce" // the default: over the limit means 429
	Shadow  Mode = "shadow"  // checked and logged, never refuses
)

// FailMode says what a rule does when the shared store cannot answer.
type FailMode string

// Fail modes.
const (
	FailOpen   FailMode = "open"   // the default: limit locally, approximately
	FailClosed FailMode = "closed" // refuse: for logins, password resets, SMS
)

// Duration is a time.Duration written as in Go ("1s", "90ms") or in days
// ("1d").
type Duration time.Duration

// ParseDuration parses a rule's period.
func ParseDuration(s string) (Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days <= 0 || days > 366 {
			return 0, fmt.Errorf("period %q: want a whole number of days from 1 to 366", s)
		}
		return Duration(time.Duration(days) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("period %q: want a duration such as 1s, 1m, 1h or 1d", s)
	}
	return Duration(d), nil
}

// String formats d the way ParseDuration reads it.
func (d Duration) String() string {
	td := time.Duration(d)
	for _, u := range []struct {
		d      time.Duration
		suffix string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if td >= u.d && td%u.d == 0 {
			return strconv.FormatInt(int64(td/u.d), 10) + u.suffix
		}
	}
	return td.String()
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler, so that a bad period in a
// rules file is reported with its line.
func (d *Duration) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: period must be a duration such as 1s, 1m, 1h or 1d", node.Line)
	}
	if err := d.UnmarshalText([]byte(node.Value)); err != nil {
		return fmt.Errorf("line %d: %w", node.Line, err)
	}
	return nil
}

// Limit is one limit as a rule writes it: "rate per per, burst burst".
type Limit struct {
	Name string `json:"name" yaml:"name"`
	// Rate is the tokens granted per Per; see [Rate] for decimal rates.
	Rate Rate     `json:"rate" yaml:"rate"`
	Per  Duration `json:"per" yaml:"per"`
	// Burst is the most tokens a key may hold; zero means the count of
	// one period (for a decimal rate, of the stretched period: 3 for 1.5
	// a second, read as 3 per 2s).
	Burst     Tokens          `json:"burst,omitempty" yaml:"burst,omitempty"`
	Algorithm limit.Algorithm `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
}

// Match narrows a rule's scope.
type Match struct {
	Plan     string `json:"plan,omitempty" yaml:"plan,omitempty"`
	Endpoint string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	Key      string `json:"key,omitempty" yaml:"key,omitempty"`
	// Org names the organization an org rule matches; empty in an org
	// rule means every organization, each counted on its own.
	Org string `json:"org,omitempty" yaml:"org,omitempty"`
}

// Rule is one entry of the rules table.
type Rule struct {
	// ID is the rules service's identifier; zero in a rules file.
	ID int64 `json:"id,omitempty" yaml:"id,omitempty"`
	// Version is the rules service's snapshot version that last changed
	// the rule, carried in its snapshots so that a refusal can name the
	// rule's own version; zero in a rules file, which cannot set it.
	Version int64   `json:"version,omitempty" yaml:"-"`
	Scope   Scope   `json:"scope" yaml:"scope"`
	Match   Match   `json:"match,omitzero" yaml:"match,omitempty"`
	Limits  []Limit `json:"limits" yaml:"limits"`
	// Quotas are daily and monthly counts, counted in batches (package
	// quota); a rule may have quotas and no limits.
	Quotas []Quota `json:"quotas,omitempty" yaml:"quotas,omitempty"`
	// Concurrency is the most requests of one key (or client address) in
	// flight at once, across the fleet (package inflight); zero means no
	// such limit. The most specific rule that sets it wins.
	Concurrency int64     `json:"concurrency,omitempty" yaml:"concurrency,omitempty"`
	Mode        Mode      `json:"mode,omitempty" yaml:"mode,omitempty"`
	FailMode    FailMode  `json:"fail_mode,omitempty" yaml:"fail_mode,omitempty"`
	ExpiresAt   time.Time `json:"expires_at,omitzero" yaml:"expires_at,omitempty"`
	Reason      string    `json:"reason,omitempty" yaml:"reason,omitempty"`
	// Refusals says whether a request this rule's limits refuse still
	// spends their tokens: RefusalsFree (the default) or RefusalsCount.
	Refusals Refusals `json:"refusals,omitempty" yaml:"refusals,omitempty"`
}

// KeyInfo is what the key directory knows of one API key.
type KeyInfo struct {
	Plan string `json:"plan" yaml:"plan"`
	Org  string `json:"org,omitempty" yaml:"org,omitempty"`
}

// Endpoint is a named route and its cost in tokens.
type Endpoint struct {
	Name string `json:"name" yaml:"name"`
	// Method is an HTTP method; empty matches any.
	Method string `json:"method,omitempty" yaml:"method,omitempty"`
	// Path is matched exactly, or as a prefix when it ends in "*"; see
	// [Set.MatchEndpoint] for the spellings of a path that match it.
	Path string `json:"path" yaml:"path"`
	// CaseSensitive matches Path with its letters' case as written. The
	// default ignores case, as many servers route: /V1/Login reaches the
	// handler of /v1/login there, and must not escape its limits.
	CaseSensitive bool `json:"case_sensitive,omitempty" yaml:"case_sensitive,omitempty"`
	// Cost is the tokens one request takes; zero means 1.
	Cost Tokens `json:"cost,omitempty" yaml:"cost,omitempty"`
	// CostHeader, when set, names the response header or trailer in which
	// the upstream tells the request's true cost: Cost is then the
	// estimate taken before the request passes, and the gateway settles
	// the difference once the response ends (see docs/algorithms.md).
	CostHeader string `json:"cost_header,omitempty" yaml:"cost_header,omitempty"`
}

// Document is a rule set as written: the rules file's YAML, or the JSON body
// of a snapshot.
type Document struct {
	Keys      map[string]KeyInfo `json:"keys,omitempty" yaml:"keys,omitempty"`
	Endpoints []Endpoint         `json:"endpoints,omitempty" yaml:"endpoints,omitempty"`
	Rules     []Rule             `json:"rules" yaml:"rules"`
}

// FieldError names what is wrong in a rule set and where.
type FieldError struct {
	// Where locates the offending entry, such as "rules[2] (plan pro)".
	Where string
	// Field is the field at fault, such as "limits[0].rate".
	Field string
	// Problem says what is wrong with it.
	Problem string
}

// Error formats the error as "where: field: problem".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Where + ": " + e.Problem
	}
	return e.Where + ": " + e.Field + ": " + e.Problem
}

// toLimit converts a written limit, validating it. A decimal rate becomes
// the same rate in whole tokens over a multiple of the period; an error
// names the rate as written.
func (l *Limit) toLimit(failClosed bool) (limit.Limit, error) {
	if l.Per <= 0 {
		return limit.Limit{}, errors.New("per is missing or not positive")
	}
	num, den, err := l.Rate.fraction()
	if err != nil {
		return limit.Limit{}, err
	}
	if num == 0 {
		return limit.Limit{}, fmt.Errorf("rate %s must be positive", l.Rate)
	}
	per := time.Duration(l.Per)
	if den > 1 {
		if per > time.Duration(math.MaxInt64/den) || per*time.Duration(den) > maxPeriod {
			return limit.Limit{}, fmt.Errorf("rate %s per %s is %d per %d × %s, a period longer than 366 days: "+
				"write a whole rate or a shorter period", l.Rate, l.Per, num, den, l.Per)
		}
		per *= time.Duration(den)
		if alg := limit.Algorithm(l.Algorithm); alg == limit.FixedWindow || alg == limit.SlidingWindow || alg == limit.SlidingLog {
			return limit.Limit{}, fmt.Errorf("rate %s per %s: %s counts whole requests per window, so it would "+
				"become %d per %s, another window; write rate: %d, per: %s if that is what you mean",
				l.Rate, l.Per, alg, num, Duration(per), num, Duration(per))
		}
	}
	out := limit.Limit{Name: l.Name, Count: num, Period: per, Burst: int64(l.Burst),
		Algorithm: l.Algorithm, FailClosed: failClosed}
	if err := out.Validate(); err != nil {
		if den > 1 {
			return limit.Limit{}, fmt.Errorf("rate %s per %s (read as %d per %s): %w", l.Rate, l.Per, num, Duration(per), err)
		}
		return limit.Limit{}, err
	}
	return out, nil
}

// maxPeriod is the longest period a rule may have.
const maxPeriod = 366 * 24 * time.Hour
