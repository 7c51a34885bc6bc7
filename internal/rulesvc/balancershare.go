package rulesvc

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/share"
)

// BalancerShares reads a key's region shares from the quota balancer, for
// explain: GET balancer.KeyPath + key, with an operator's token (one
// without a region, which reads that path only).
type BalancerShares struct {
	// URL is the balancer's base URL, such as http://127.0.0.1:8084.
	URL string
	// Token is the operator's bearer token.
	Token string
	// HTTPClient makes the calls; nil means one with a 2 s timeout.
	HTTPClient *http.Client
}

// sharesOf returns region's share of each limit of storeKey, as the
// balancer has set them now.
func (b *BalancerShares) sharesOf(ctx context.Context, storeKey, region string) (func(storeKey, limitName string) (limit.Fraction, bool), error) {
	hc := cmp.Or(b.HTTPClient, &http.Client{Timeout: 2 * time.Second})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(b.URL, "/")+balancer.KeyPath+url.PathEscape(storeKey), nil)
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	if b.Token != "" {
		req.Header.Set("Authorization", "Bearer "+b.Token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("balancer: read the shares of %s: %w", storeKey, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("balancer: shares of %s: %s: %s", storeKey, resp.Status, strings.TrimSpace(string(body)))
	}
	var ks balancer.KeyShares
	if err := json.Unmarshal(body, &ks); err != nil {
		return nil, fmt.Errorf("balancer: shares of %s: %w", storeKey, err)
	}
	def, ok := ks.Defaults[region]
	if !ok {
		return nil, fmt.Errorf("balancer: no region %q (it knows %d regions)", region, len(ks.Defaults))
	}
	return func(_, name string) (limit.Fraction, bool) {
		s := def.Share
		if rs, ok := ks.Limits[name][region]; ok {
			s = rs.Share
		}
		return limit.Fraction{Num: int64(s), Den: share.Whole}, true
	}, nil
}
