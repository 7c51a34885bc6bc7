package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// NewProxy returns a reverse proxy to upstream. The upstream sees the
// inbound X-Forwarded-For chain with the gateway's peer appended, and
// X-Forwarded-Host and -Proto; its own rate limit headers are dropped so a
// client only ever sees the gateway's account of its budget. An upstream
// that cannot be reached is a 502 problem document, and one that does not
// answer within the transport's response timeout a 504. Its Transport is
// Upstream{}.Transport(), a keep-alive pool sized for a gateway; set it to
// another Upstream's for other sizes, timeouts or TLS files. logger may be
// nil.
func NewProxy(upstream *url.URL, logger *slog.Logger) *httputil.ReverseProxy {
	logger = cmp.Or(logger, slog.New(slog.DiscardHandler))
	return &httputil.ReverseProxy{
		Transport: Upstream{}.transport(nil),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			// Rewrite drops the inbound chain; keep it, as a Director
			// would, and let SetXForwarded append this hop.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			for _, h := range rateHeaders {
				resp.Header.Del(h)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				// The client went away; there is nobody to answer.
				return
			}
			logger.LogAttrs(r.Context(), slog.LevelError, "upstream request failed",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				WriteError(w, newError(http.StatusGatewayTimeout, "the upstream service did not answer in time", err))
				return
			}
			WriteError(w, newError(http.StatusBadGateway, "the upstream service could not be reached", err))
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// Health returns a handler that reports the gateway is serving, with the
// hash and version of the rule set in force; 503 while there is none.
func Health(src RuleSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Status       string `json:"status"`
			RulesHash    string `json:"rules_hash,omitempty"`
			RulesVersion int64  `json:"rules_version,omitempty"`
		}
		body.Status = "ok"
		status := http.StatusOK
		if set := src.Current(); set == nil {
			body.Status, status = "no rules", http.StatusServiceUnavailable
		} else {
			body.RulesHash, body.RulesVersion = set.Hash, set.Version
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(body)
	})
}
