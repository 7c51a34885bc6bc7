// Package quota counts daily and monthly quotas in batches: each gateway
// keeps its own counts of a period in memory and adds them to the shared
// counters every few seconds, so a busy key costs the shared store one
// call per batch rather than one per request.
//
// The core, [Counter], does no I/O and reads no clock: time is an argument,
// and a flush is a list of additions out ([Counter.Pending]) and the shared
// totals back in ([Counter.Settle]). [Batcher] drives it on a ticker against
// an [Adder] (redisstore.Store in production).
//
// # The bound
//
// Between two flushes a gateway admits, for a key's quota, at most its
// share of what was left when it last heard the shared total: ceil(R/N) of
// the remaining R, for a fleet of N. With every gateway's view equally
// fresh, the fleet passes the quota by at most N-1 (the roundings). A
// gateway's view is at most one interval old, so it can also spend what
// the others admitted in that interval before it hears of it: in general
// the fleet passes a quota by at most
//
//	N-1 + (the fleet's admissions of the key in one interval)
//
// which, for a key sending r requests a second across the fleet and a batch
// interval of I, is N-1 + r × I. A gateway that cannot reach the store
// admits its share of the whole quota, ceil(Count/N), until it can.
// docs/limit-kinds.md states it with figures; the tests measure it.
package quota

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Period is how long a quota's count lasts.
type Period string

// The periods a quota counts over: calendar days and calendar months in the
// quota's time zone.
const (
	Day   Period = "day"
	Month Period = "month"
)

// Quota is one quota of a key, such as "10000 a day, Berlin time". A Quota
// is a value; the zero value is invalid (see Validate).
type Quota struct {
	// Name identifies the quota among a key's quotas, as a limit's name
	// does: printable ASCII without spaces, braces or colons.
	Name string
	// Count is how many requests (tokens) a key may make in one period.
	Count int64
	// Period is Day or Month.
	Period Period
	// Location is the time zone the period's calendar is read in. Nil
	// means UTC.
	Location *time.Location
	// Key is the store key the quota counts under instead of the
	// request's: an organization's quota counts every key of the org
	// under the org's ("o:acme"). Empty means the request's key.
	Key string
	// Shadow marks a quota tried out before it is enforced (a rule's mode:
	// shadow): it counts in a counter of its own, the requests the
	// enforced quotas admit and it would, and never refuses; a request it
	// would refuse is reported in Decision.ShadowRefused.
	Shadow bool
}

// Validate reports whether q can be counted, naming the field at fault.
func (q *Quota) Validate() error {
	switch {
	case q.Name == "":
		return errors.New("quota: name is empty")
	case len(q.Name) > 64:
		return fmt.Errorf("quota %q...: name is %d bytes, longer than 64", q.Name[:16], len(q.Name))
	case q.Count <= 0:
		return fmt.Errorf("quota %q: count %d must be positive", q.Name, q.Count)
	case q.Period != Day && q.Period != Month:
		return fmt.Errorf("quota %q: period %q is not day or month", q.Name, q.Period)
	}
	for i := 0; i < len(q.Name); i++ {
		if c := q.Name[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == ':' {
			return fmt.Errorf("quota %q: name may hold only printable ASCII without spaces, braces or colons", q.Name)
		}
	}
	return nil
}

// Window returns the period of q that holds t: its start and end (the
// next period's start), and its ID, the start's date in q's time zone
// ("2026-12-03" for a day, "2026-12" for a month), which names the
// period's counter.
func (q *Quota) Window(t time.Time) (id string, start, end time.Time) {
	loc := cmp.Or(q.Location, time.UTC)
	lt := t.In(loc)
	y, m, d := lt.Date()
	if q.Period == Month {
		start = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		return start.Format("2006-01"), start, start.AddDate(0, 1, 0)
	}
	start = time.Date(y, m, d, 0, 0, 0, 0, loc)
	return start.Format("2006-01-02"), start, start.AddDate(0, 0, 1)
}

// CounterName returns the name of key's counter of quota q in the period
// with the given ID: the quota's name, its period, its zone and the ID,
// so that a changed zone or period starts a new count.
func (q *Quota) CounterName(id string) string {
	name := q.Name + ":" + string(q.Period) + ":" + cmp.Or(q.Location, time.UTC).String() + ":" + id
	if q.Shadow {
		// A name has no colon, so no enforced quota's counter is named so.
		return "shadow:" + name
	}
	return name
}

// keyOf returns the store key q counts under for a request of key.
func (q *Quota) keyOf(key string) string { return cmp.Or(q.Key, key) }

// Remaining returns what is left of count after used, never negative.
func Remaining(count, used int64) int64 { return max(count-used, 0) }
