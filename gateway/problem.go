package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// QuotaExceeded is the problem type of a refused request, registered by the
// IETF httpapi ratelimit-headers draft.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is an RFC 9457 problem document, the body of every response the
// gateway answers itself. The fields after Detail are extension members
// that only some problems carry.
type Problem struct {
	// Type is a URI naming the kind of problem; "about:blank" when the
	// status says it all.
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code of the response.
	Status int `json:"status"`
	// Detail explains this occurrence of the problem.
	Detail string `json:"detail,omitempty"`
	// Limit names the limit that refused the request.
	Limit string `json:"limit,omitempty"`
	// ViolatedPolicies names the quota policies that were exceeded, as the
	// ratelimit-headers draft defines for the quota-exceeded problem type.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfterMillis is how long to wait before the same request can
	// pass, in milliseconds.
	RetryAfterMillis int64 `json:"retry_after_ms,omitempty"`
	// Rule names the rule of the limit that refused the request: its
	// scope, plan or override, rule ID and rules version.
	Rule *ProblemRule `json:"rule,omitempty"`
	// Limits are every enforced limit the refused request was checked
	// against, the refusing one marked.
	Limits []ProblemLimit `json:"limits,omitempty"`
}

// Error is an error the gateway answers with a problem document instead of
// passing the request on. Middleware and handlers return it; WriteError
// writes it.
type Error struct {
	// Problem is the response body; its Status is the response status.
	Problem Problem
	// Err is the cause, for logs; clients never see it.
	Err error
}

// Error describes the problem and its cause, for logs.
func (e *Error) Error() string {
	msg := "gateway: " + strconv.Itoa(e.Problem.Status) + " " + e.Problem.Title
	if e.Problem.Detail != "" {
		msg += ": " + e.Problem.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// newError returns an Error of the plain kind: type about:blank, the
// status's own text as title.
func newError(status int, detail string, cause error) *Error {
	return &Error{Problem: Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}, Err: cause}
}

// WriteError answers a request with err. An *Error (or an error wrapping
// one) gives the status and the problem document; any other error is a 500
// whose text is not shown. Headers already set on w, such as the rate
// limit fields and Retry-After, are kept.
func WriteError(w http.ResponseWriter, err error) {
	var ge *Error
	if !errors.As(err, &ge) {
		ge = newError(http.StatusInternalServerError, "", err)
	}
	p := ge.Problem
	if p.Status < 400 || p.Status > 599 {
		p.Status = http.StatusInternalServerError
	}
	p.Type = cmp.Or(p.Type, "about:blank")
	p.Title = cmp.Or(p.Title, http.StatusText(p.Status))
	body, jerr := json.Marshal(p)
	if jerr != nil {
		// A Problem holds only strings and integers; this cannot happen.
		body = []byte(`{"type":"about:blank","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Encoding")
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}
