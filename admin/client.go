// Package admin is a client of the rules service's admin API, /admin/v1:
// the rules, emergency overrides, key directory and endpoints, the
// rollout of each version, the audit log and the fleet of gateways. The
// service describes the API in OpenAPI at /admin/v1/openapi.json.
//
// A Client is its configuration; its methods take a context and return
// the service's answer decoded, or an error: an *Error when the service
// refused the request.
package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/rules"
)

// Prefix is where the admin API lives below the service's base URL.
const Prefix = "/admin/v1"

// Client calls one rules service's admin API. Its zero value has no
// BaseURL and fails every call. A Client is safe for concurrent use once
// its fields are set.
type Client struct {
	// BaseURL is the rules service's URL, such as http://127.0.0.1:8083,
	// without the /admin/v1 prefix.
	BaseURL string
	// Token is the bearer token sent with every request: one of role read,
	// or write for changes. Empty sends none.
	Token string
	// HTTPClient makes the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// Error is the service's refusal of a request.
type Error struct {
	// Status is the HTTP status, such as 400 or 422.
	Status int
	// Message is the service's explanation.
	Message string `json:"error"`
	// Field names the request field at fault, when one is.
	Field string `json:"field,omitempty"`
	// Rule is the ID of the stored rule at fault, when a rule set did not
	// compile because of it.
	Rule int64 `json:"rule,omitempty"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("rules service: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// maxAnswer bounds the body of an answer the client reads.
const maxAnswer = 64 << 20

// do sends a request to Prefix+path with body as JSON, unless nil, and
// decodes a 2xx answer into out, unless nil.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	if c.BaseURL == "" {
		return errors.New("admin: Client.BaseURL is empty")
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("admin: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+Prefix+path, rd)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := cmp.Or(c.HTTPClient, http.DefaultClient).Do(req)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("admin: read answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(raw, e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(raw))
			if e.Message == "" {
				e.Message = "no explanation"
			}
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("admin: decode answer to %s %s: %w", method, path, err)
	}
	return nil
}

// call sends a request as do does and returns the answer decoded into a T.
func call[T any](ctx context.Context, c *Client, method, path string, body any) (T, error) {
	var out T
	err := c.do(ctx, method, path, body, &out)
	return out, err
}

// ruleList gets the rules of an answer shaped {"rules": [...]}.
func ruleList[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	out, err := call[struct {
		Rules []T `json:"rules"`
	}](ctx, c, "GET", path, nil)
	return out.Rules, err
}

// Rules returns every stored rule, overrides included, by ID.
func (c *Client) Rules(ctx context.Context) ([]RuleView, error) {
	return ruleList[RuleView](ctx, c, "/rules")
}

// Rule returns the rule id.
func (c *Client) Rule(ctx context.Context, id int64) (RuleView, error) {
	return call[RuleView](ctx, c, "GET", "/rules/"+strconv.FormatInt(id, 10), nil)
}

// CreateRule adds a rule; the service assigns its ID.
func (c *Client) CreateRule(ctx context.Context, r rules.Rule) (Changed[RuleView], error) {
	return call[Changed[RuleView]](ctx, c, "POST", "/rules", r)
}

// ReplaceRule replaces the rule id with r.
func (c *Client) ReplaceRule(ctx context.Context, id int64, r rules.Rule) (Changed[RuleView], error) {
	return call[Changed[RuleView]](ctx, c, "PUT", "/rules/"+strconv.FormatInt(id, 10), r)
}

// DeleteRule deletes the rule id.
func (c *Client) DeleteRule(ctx context.Context, id int64) (Published, error) {
	out, err := call[Changed[RuleView]](ctx, c, "DELETE", "/rules/"+strconv.FormatInt(id, 10), nil)
	return out.Snapshot, err
}

// ValidateRule reports whether the rule set would compile with r added
// (or, when r.ID is set, replaced), and saves nothing.
func (c *Client) ValidateRule(ctx context.Context, r rules.Rule) (Validation, error) {
	return call[Validation](ctx, c, "POST", "/rules/validate", r)
}

// ApplyRuleSet makes doc the rule set in one version: its rules replace
// every rule but the emergency overrides, and its keys and endpoints, when
// not nil, replace the stored ones (an empty, non-nil section removes
// them all). The answer lists the differences. With dryRun, nothing is stored. A doc that matches what is
// stored makes no version.
func (c *Client) ApplyRuleSet(ctx context.Context, doc rules.Document, dryRun bool) (Applied, error) {
	path := "/ruleset"
	if dryRun {
		path += "?dry_run=true"
	}
	// rules.Document leaves empty sections out; here an empty section
	// empties what is stored, and only a nil one is left out.
	body := struct {
		Keys      *map[string]rules.KeyInfo `json:"keys,omitempty"`
		Endpoints *[]rules.Endpoint         `json:"endpoints,omitempty"`
		Rules     []rules.Rule              `json:"rules"`
	}{Rules: doc.Rules}
	if doc.Keys != nil {
		body.Keys = &doc.Keys
	}
	if doc.Endpoints != nil {
		body.Endpoints = &doc.Endpoints
	}
	if body.Rules == nil {
		body.Rules = []rules.Rule{}
	}
	return call[Applied](ctx, c, "PUT", path, body)
}

// Overrides returns the emergency overrides, by ID.
func (c *Client) Overrides(ctx context.Context) ([]RuleView, error) {
	return ruleList[RuleView](ctx, c, "/overrides")
}

// SetOverride sets the emergency override of the API key, replacing any it
// had. It goes to every gateway at once, skipping the canary.
func (c *Client) SetOverride(ctx context.Context, key string, o Override) (Changed[RuleView], error) {
	return call[Changed[RuleView]](ctx, c, "PUT", "/overrides/"+url.PathEscape(key), o)
}

// EndOverride removes the emergency override of the API key.
func (c *Client) EndOverride(ctx context.Context, key string) (Published, error) {
	out, err := call[Changed[RuleView]](ctx, c, "DELETE", "/overrides/"+url.PathEscape(key), nil)
	return out.Snapshot, err
}

// Key returns the directory entry of the API key.
func (c *Client) Key(ctx context.Context, key string) (rules.KeyInfo, error) {
	return call[rules.KeyInfo](ctx, c, "GET", "/keys/"+url.PathEscape(key), nil)
}

// Endpoints returns the endpoints, by name.
func (c *Client) Endpoints(ctx context.Context) ([]rules.Endpoint, error) {
	out, err := call[struct {
		Endpoints []rules.Endpoint `json:"endpoints"`
	}](ctx, c, "GET", "/endpoints", nil)
	return out.Endpoints, err
}

// Rollout returns the stable version and the newest rollouts.
func (c *Client) Rollout(ctx context.Context) (RolloutStatus, error) {
	return call[RolloutStatus](ctx, c, "GET", "/rollout", nil)
}

// Promote promotes the running canary to every gateway; reason is
// required and goes to the audit log.
func (c *Client) Promote(ctx context.Context, reason string) (Decision, error) {
	return c.decide(ctx, "promote", reason)
}

// Halt halts the running canary: its gateways go back to the stable
// version. reason is required and goes to the audit log.
func (c *Client) Halt(ctx context.Context, reason string) (Decision, error) {
	return c.decide(ctx, "halt", reason)
}

func (c *Client) decide(ctx context.Context, how, reason string) (Decision, error) {
	return call[Decision](ctx, c, "POST", "/rollout/"+how, map[string]string{"reason": reason})
}

// Audit returns up to limit audit entries, newest first, older than the
// entry before; zero for either means the service's default (100 entries,
// from the newest).
func (c *Client) Audit(ctx context.Context, limit int, before int64) ([]AuditEntry, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	path := "/audit"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	out, err := call[struct {
		Entries []AuditEntry `json:"entries"`
	}](ctx, c, "GET", path, nil)
	return out.Entries, err
}

// Fleet returns the gateways that polled within the gateway TTL.
func (c *Client) Fleet(ctx context.Context) (Fleet, error) {
	return call[Fleet](ctx, c, "GET", "/fleet", nil)
}

// Shadow returns what each shadow rule would have refused over the last
// since (a duration such as "1h"), by rule.
func (c *Client) Shadow(ctx context.Context, since string) ([]ShadowRule, error) {
	return ruleList[ShadowRule](ctx, c, "/shadow?since="+url.QueryEscape(since))
}
