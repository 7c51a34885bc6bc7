package rulesync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesync"
	"github.com/sluice-rl/sluice/rules"
)

// A gateway follows the rules service and limits each request with the
// rule set in force.
func Example() {
	// A stand-in for the rules service, with one snapshot.
	doc := rules.Document{
		Keys:  map[string]rules.KeyInfo{"key_8f3": {Plan: "pro"}},
		Rules: []rules.Rule{{ID: 1, Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Limits: []rules.Limit{{Name: "s", Rate: 100, Per: rules.Duration(time.Second)}}}},
	}
	set, _ := rules.Compile(doc, 12)
	raw, _ := json.Marshal(doc)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("after") == "12" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		json.NewEncoder(w).Encode(rulesapi.Snapshot{Version: 12, Hash: set.Hash, Document: raw,
			Fleet: rulesapi.Fleet{Total: 3, Regions: map[string]int{"eu": 3}}})
	}))
	defer srv.Close()

	c, err := rulesync.New(rulesync.Config{URL: srv.URL, Gateway: "gw-1", Region: "eu", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	<-c.Ready()
	res := c.Current().Resolve(time.Now(), rules.Query{APIKey: "key_8f3"})
	fmt.Printf("version %d: %s %d per %v; fleet %d\n", c.Current().Version, res.Limits[0].Name, res.Limits[0].Count,
		res.Limits[0].Period, c.FleetSize().Total)
	cancel()
	<-done
	// Output: version 12: s 100 per 1s; fleet 3
}
