package rulesvc

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/rulesapi"
)

// apiError is an error with the HTTP status and the field it is about. One
// place, handle, turns it into a response.
type apiError struct {
	status int
	field  string
	rule   int64 // the stored rule at fault, if any
	msg    string
}

func (e *apiError) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}

func badRequest(field, format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, field: field, msg: fmt.Sprintf(format, a...)}
}

func notFound(format string, a ...any) *apiError {
	return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf(format, a...)}
}

// errorBody is every error response.
type errorBody struct {
	Error string `json:"error"`
	// Field names the request field at fault, when one is.
	Field string `json:"field,omitempty"`
	// Rule is the ID of the rule at fault, when a rule set did not compile.
	Rule int64 `json:"rule,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeJSON(w, ae.status, errorBody{Error: ae.Error(), Field: ae.field, Rule: ae.rule})
		return
	}
	writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error"})
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// decode reads a JSON body into v, refusing unknown fields and trailing
// data, with an error that names the field at fault.
func decode(r *http.Request, v any) error { return decodeUpTo(r, v, maxBody) }

// decodeUpTo is decode for a body of at most limit bytes.
func decodeUpTo(r *http.Request, v any, limit int) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		return badRequest("", "read body: %v", err)
	}
	if len(body) > limit {
		return &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body is larger than %d bytes", limit)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return badRequest(te.Field, "want a %v, got JSON %s", te.Type, te.Value)
		case errors.As(err, &se):
			return badRequest("", "body is not valid JSON: %v", err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badRequest(f, "unknown field")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("", "body is not valid JSON: it ends too early")
		case errors.Is(err, io.EOF):
			return badRequest("", "body is empty")
		}
		return badRequest("", "body: %v", err)
	}
	if dec.More() {
		return badRequest("", "body holds more than one JSON value")
	}
	return nil
}

// query parses the query parameter name into *v with parse when it is
// given; a value that parse refuses, or ok (if not nil) does not accept,
// is a 400 saying that it is not want.
func query[T any](r *http.Request, name string, v *T, parse func(string) (T, error), ok func(T) bool, want string) error {
	s := r.URL.Query().Get(name)
	if s == "" {
		return nil
	}
	x, err := parse(s)
	if err != nil || (ok != nil && !ok(x)) {
		return badRequest(name, "%q is not %s", s, want)
	}
	*v = x
	return nil
}

func parseInt(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

// Role is what a token may do.
type Role string

// The roles of tokens.
const (
	// RoleRead may read the admin API.
	RoleRead Role = "read"
	// RoleWrite may read and change the admin API.
	RoleWrite Role = "write"
	// RoleGateway may poll snapshots and send reports.
	RoleGateway Role = "gateway"
)

// Token is one bearer token the service accepts.
type Token struct {
	// Name identifies the token's holder in the audit log.
	Name string `yaml:"name"`
	// Secret is the token itself.
	Secret string `yaml:"secret"`
	// Role is what it may do.
	Role Role `yaml:"role"`
	// MaxGateways bounds, for a token of RoleGateway, how many gateways
	// may be registered under it at once (those that polled within the
	// gateway TTL). Zero means Config.MaxGateways. A gateway ID belongs to
	// the token that registered it while it lives: another token cannot
	// poll or report as it.
	MaxGateways int `yaml:"max_gateways,omitempty"`
	// Gateway, for a token of RoleGateway, is the one gateway ID the token
	// may poll and report as: a per-gateway credential, so that a leaked
	// token speaks for one gateway, not for max_gateways of them. Empty
	// means any IDs, up to MaxGateways.
	Gateway string `yaml:"gateway,omitempty"`
	// Region, for a token of RoleGateway, is the one region its gateways
	// may poll and report as. Empty means any.
	Region string `yaml:"region,omitempty"`
}

// token is a Token with its secret hashed, so comparisons take the same
// time whatever the lengths.
type token struct {
	name        string
	sum         [32]byte
	role        Role
	maxGateways int    // for RoleGateway
	gateway     string // the only gateway ID it may use; "" for any
	region      string // the only region it may use; "" for any
}

func checkTokens(ts []Token) error {
	seen := map[string]bool{}
	for i, t := range ts {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, " \t\n"):
			return fmt.Errorf("rulesvc: tokens[%d]: name %q is empty or holds spaces", i, t.Name)
		case len(t.Secret) < 16:
			return fmt.Errorf("rulesvc: token %s: secret is %d bytes, want at least 16", t.Name, len(t.Secret))
		case t.Role != RoleRead && t.Role != RoleWrite && t.Role != RoleGateway:
			return fmt.Errorf("rulesvc: token %s: role %q is not read, write or gateway", t.Name, t.Role)
		case seen[t.Secret]:
			return fmt.Errorf("rulesvc: token %s: secret is used by another token", t.Name)
		case t.MaxGateways < 0 || (t.MaxGateways > 0 && t.Role != RoleGateway):
			return fmt.Errorf("rulesvc: token %s: max_gateways %d: want a positive bound, on a gateway token only", t.Name, t.MaxGateways)
		case (t.Gateway != "" || t.Region != "") && t.Role != RoleGateway:
			return fmt.Errorf("rulesvc: token %s: gateway and region bind a gateway token only, not one of role %s", t.Name, t.Role)
		case t.Gateway != "" && t.MaxGateways > 1:
			return fmt.Errorf("rulesvc: token %s: bound to gateway %q, so max_gateways %d cannot be above 1", t.Name, t.Gateway, t.MaxGateways)
		case t.Gateway != "" && rulesapi.CheckGatewayID(t.Gateway) != nil:
			return fmt.Errorf("rulesvc: token %s: %w", t.Name, rulesapi.CheckGatewayID(t.Gateway))
		}
		seen[t.Secret] = true
	}
	return nil
}

func compileTokens(ts []Token, maxGateways int) (out []token) {
	for _, t := range ts {
		tk := token{name: t.Name, sum: sha256.Sum256([]byte(t.Secret)), role: t.Role,
			maxGateways: cmp.Or(t.MaxGateways, maxGateways), gateway: t.Gateway, region: t.Region}
		if tk.gateway != "" {
			tk.maxGateways = 1
		}
		out = append(out, tk)
	}
	return out
}

// caller finds the token of a request. It compares with every token, so the
// time taken does not say which one nearly matched.
func (s *Service) caller(r *http.Request) (token, bool) {
	// The scheme is case-insensitive (RFC 9110, section 11.1).
	auth := r.Header.Get("Authorization")
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "Bearer ") {
		return token{}, false
	}
	secret := strings.TrimLeft(auth[7:], " ")
	if secret == "" {
		return token{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	var found token
	match := 0
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			found, match = t, 1
		}
	}
	return found, match == 1
}

// allows reports whether a token of role have may do what need asks.
func allows(have, need Role) bool {
	return have == need || (have == RoleWrite && need == RoleRead)
}

// authorized serves h to callers whose token may do what need asks, and
// is the one place that writes a handler's error, logging the unexpected
// ones. The gateway endpoints (need RoleGateway) are open, on a trusted
// network, when no gateway token is configured: h then gets the zero token
// with the network's bound.
func (s *Service) authorized(need Role, h func(w http.ResponseWriter, r *http.Request, tok token) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := s.caller(r)
		switch {
		case need == RoleGateway && s.gwOpen:
			t = token{role: RoleGateway, maxGateways: s.cfg.MaxGateways}
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, field: "Authorization",
				msg: "missing or unknown bearer token"})
			return
		case !allows(t.role, need):
			writeError(w, &apiError{status: http.StatusForbidden, field: "Authorization",
				msg: fmt.Sprintf("token %s has role %s; this needs %s", t.name, t.role, need)})
			return
		}
		err := h(w, r, t)
		if err == nil || r.Context().Err() != nil {
			return // done, or the caller went away: nobody to answer
		}
		if !errors.As(err, new(*apiError)) {
			s.log.Error("rules service: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeError(w, err)
	})
}
