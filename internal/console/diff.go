package console

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/sluice-rl/sluice/rules"
)

// docChange is one difference between two versions' documents.
type docChange struct {
	Op     string // add, remove or change, as the rule set API says
	Kind   string // rule, key or endpoint
	Name   string
	Before json.RawMessage
	After  json.RawMessage
}

// diffVersions compares the documents of two snapshot versions.
func (c *Console) diffVersions(r *http.Request, from, to int64) ([]docChange, error) {
	var docs [2]rules.Document
	for i, v := range []int64{from, to} {
		raw, err := c.cfg.Document(r, v)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &docs[i]); err != nil {
			return nil, fmt.Errorf("version %d: decode its document: %w", v, err)
		}
	}
	return diffDocuments(docs[0], docs[1]), nil
}

// diffDocuments lists what changed from a to b: rules by ID, keys and
// endpoints by name, in that order, each sorted.
func diffDocuments(a, b rules.Document) []docChange {
	ruleID := func(r rules.Rule) string { return strconv.FormatInt(r.ID, 10) }
	endpointName := func(e rules.Endpoint) string { return e.Name }
	out := diffMaps("rule", byName(a.Rules, ruleID), byName(b.Rules, ruleID))
	out = append(out, diffMaps("key", a.Keys, b.Keys)...)
	return append(out, diffMaps("endpoint", byName(a.Endpoints, endpointName), byName(b.Endpoints, endpointName))...)
}

// byName indexes entries by the name name gives each.
func byName[T any](entries []T, name func(T) string) map[string]T {
	m := make(map[string]T, len(entries))
	for _, e := range entries {
		m[name(e)] = e
	}
	return m
}

// diffMaps compares two sets of entries by name; names that are numbers
// (rule IDs) sort as numbers.
func diffMaps[T any](kind string, a, b map[string]T) []docChange {
	names := slices.Collect(maps.Keys(a))
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(x, y string) int {
		nx, ex := strconv.ParseInt(x, 10, 64)
		ny, ey := strconv.ParseInt(y, 10, 64)
		if ex == nil && ey == nil {
			return cmp.Compare(nx, ny)
		}
		return cmp.Compare(x, y)
	})
	var out []docChange
	for _, n := range names {
		x, inA := a[n]
		y, inB := b[n]
		bx, by := marshalEntry(x), marshalEntry(y)
		switch {
		case !inA:
			out = append(out, docChange{Op: "add", Kind: kind, Name: n, After: by})
		case !inB:
			out = append(out, docChange{Op: "remove", Kind: kind, Name: n, Before: bx})
		case !bytes.Equal(bx, by):
			out = append(out, docChange{Op: "change", Kind: kind, Name: n, Before: bx, After: by})
		}
	}
	return out
}

func marshalEntry(e any) json.RawMessage {
	b, _ := json.Marshal(e) // rules' types always marshal
	return b
}
