package pipeline

import (
	"log/slog"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/relay"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
)

// Relay is how a gateway reaches its data centre's lease relays (sluice
// relay, docs/relay.md). The zero value means no relay: leases come from
// Redis.
type Relay struct {
	// URLs are the relays' base URLs ("http://relay-1:8090"), tried in
	// turn from Prefer. Empty means no relay.
	URLs []string
	// Prefer is the index of the relay tried first, taken modulo
	// len(URLs), so that a data centre's gateways spread over its relays.
	Prefer int
	// Token is the bearer token the relays ask for.
	Token string
	// Timeout bounds one request to a relay; past it the takes go to the
	// next relay, or to Redis directly. Zero means 50ms.
	Timeout time.Duration
	// Retry is how long a relay that failed is left alone. Zero means 1s.
	Retry time.Duration
}

// relayOver returns what the gateway's leases draw from: the relay client
// over the guard g when cfg.Relay has URLs (g is its direct path), else g.
func (p *Pipeline) relayOver(g *guard.Store, cfg Config, log *slog.Logger) (limit.Granter, error) {
	r := cfg.Relay
	if len(r.URLs) == 0 {
		return g, nil
	}
	c, err := relay.NewClient(relay.ClientConfig{
		URLs: r.URLs, Prefer: r.Prefer, Token: r.Token, Direct: g, Timeout: r.Timeout, Retry: r.Retry,
		Logger: log, Registerer: cfg.Registerer,
	})
	if err = p.push(c, err); err != nil {
		return nil, err
	}
	return c, nil
}

// Lease returns the lease store on top of the guard, or nil in process or
// with NoLeases. A relay serves its gateways from it (lease.Store.Lease):
// built with Fleet the number of relays, it leases each relay's share.
func (p *Pipeline) Lease() *lease.Store { return p.lease }
