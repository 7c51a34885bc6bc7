package admin_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

// Build explains why a key on the pro plan is limited: its plan rule
// displaces the default, its daily limit is the tightest sustained rate,
// and its buckets are read without taking.
func ExampleBuild() {
	set, err := rules.Parse("rules.yaml", []byte(`
keys: {key_pro: {plan: pro}}
rules:
  - scope: default
    limits: [{name: second, rate: 100, per: 1s}]
  - scope: plan
    match: {plan: pro}
    limits: [{name: second, rate: 80, per: 1s}, {name: day, rate: 100000, per: 1d}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	store.Take(context.Background(), &limit.Request{Key: "k:key_pro", Cost: 5, Limits: set.Resolve(now, rules.Query{APIKey: "key_pro"}).Limits})
	e, err := admin.Build(context.Background(), admin.ExplainInput{Set: set, Now: now, Key: "key_pro", Method: "GET", Path: "/v1/search",
		Source: "rules.yaml", Store: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("plan", e.Plan, "tightest", e.Tightest)
	for _, l := range e.Limits {
		left := "-"
		if l.State != nil {
			left = fmt.Sprint(l.State.Remaining)
		}
		fmt.Printf("%s %d/%s %s in force %v, left %s\n", l.Name, l.Count, l.Per, l.Rule.Scope, l.InForce, left)
	}
	// Output:
	// plan pro tightest day
	// second 100/1s default in force false, left -
	// second 80/1s plan in force true, left 75
	// day 100000/1d plan in force true, left 99995
}
