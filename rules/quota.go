package rules

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/quota"
)

// Quota is a daily or monthly quota as a rule writes it: "count per per,
// in zone".
type Quota struct {
	Name string `json:"name" yaml:"name"`
	// Count is how many requests (tokens, as the endpoint's cost says) a
	// key may make in one period.
	Count Tokens `json:"count" yaml:"count"`
	// Per is "day" or "month": a calendar day or month in Zone.
	Per quota.Period `json:"per" yaml:"per"`
	// Zone is an IANA time zone ("Europe/Berlin") the calendar is read
	// in. Empty means UTC.
	Zone string `json:"zone,omitempty" yaml:"zone,omitempty"`
}

// toQuota converts a written quota, validating it.
func (q *Quota) toQuota() (quota.Quota, error) {
	out := quota.Quota{Name: q.Name, Count: int64(q.Count), Period: q.Per}
	if q.Zone != "" {
		loc, err := time.LoadLocation(q.Zone)
		if err != nil || q.Zone == "Local" {
			return quota.Quota{}, fmt.Errorf("zone %q is not an IANA time zone such as Europe/Berlin", q.Zone)
		}
		out.Location = loc
	}
	if err := out.Validate(); err != nil {
		return quota.Quota{}, err
	}
	return out, nil
}

// compileQuotas converts r's quotas into c.
func compileQuotas(r *Rule, c *compiled) *FieldError {
	if len(r.Quotas) > 0 && r.Scope == ScopeIP {
		return &FieldError{Field: "quotas", Problem: "a quota counts an API key's use: ip rules have none"}
	}
	for j := range r.Quotas {
		q, err := r.Quotas[j].toQuota()
		if err != nil {
			return &FieldError{Field: fmt.Sprintf("quotas[%d]", j), Problem: err.Error()}
		}
		for _, prev := range c.quotas {
			if prev.Name == q.Name {
				return &FieldError{Field: fmt.Sprintf("quotas[%d].name", j), Problem: fmt.Sprintf("%q is used twice in this rule", q.Name)}
			}
		}
		q.Shadow = r.Mode == Shadow
		c.quotas = append(c.quotas, q)
	}
	return nil
}
