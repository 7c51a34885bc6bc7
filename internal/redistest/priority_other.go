//go:build !linux

package redistest

import "errors"

// Favour would run the server ahead of everything else on the machine; it
// is implemented on Linux only.
func (s *Server) Favour() error {
	return errors.New("redistest: favour: raising a server's priority is implemented on Linux only")
}
