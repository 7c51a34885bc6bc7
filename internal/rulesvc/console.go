package rulesvc

import (
	"fmt"
	"net/http"

	"github.com/sluice-rl/sluice/internal/console"
)

// consoleRoutes serves the operator console under console.Prefix. It calls
// the admin API on mux, in-process, with the signed-in person's token, so
// it may do what that token may do through the API and nothing more.
func (s *Service) consoleRoutes(mux *http.ServeMux) {
	c := console.New(console.Config{
		API:           mux,
		Authenticate:  s.consoleLogin,
		Document:      s.snapshotDocument,
		CanaryWindow:  s.cfg.Canary.Window,
		CanaryMaxWait: s.cfg.Canary.MaxWait,
		Logger:        s.log,
	})
	mux.Handle(console.Prefix+"/", c)
	mux.Handle(console.Prefix, c)
}

// consoleLogin says whose an admin token is; a gateway token may not sign
// in.
func (s *Service) consoleLogin(secret string) (name string, write bool, ok bool) {
	r := &http.Request{Header: http.Header{"Authorization": {"Bearer " + secret}}}
	t, found := s.caller(r)
	if !found || !allows(t.role, RoleRead) {
		return "", false, false
	}
	return t.name, t.role == RoleWrite, true
}

// snapshotDocument is the rules document of version v, for the console's
// diff between versions. It holds what a read token may see through the
// API (the rules, the key directory and the endpoints); the console asks
// only for a signed-in session.
func (s *Service) snapshotDocument(r *http.Request, v int64) ([]byte, error) {
	var doc []byte
	err := s.pool.QueryRow(r.Context(), "SELECT document FROM snapshots WHERE version = $1", v).Scan(&doc)
	if isNoRows(err) {
		return nil, fmt.Errorf("no snapshot version %d", v)
	}
	if err != nil {
		return nil, fmt.Errorf("read snapshot %d: %w", v, err)
	}
	return doc, nil
}
