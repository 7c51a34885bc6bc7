package redistest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
)

// TLS sets up a TLS port on a server, beside its plaintext one. The
// harness keeps speaking plaintext (Do, PING at start, cluster creation);
// the code under test is pointed at TLSAddr. On a cluster the nodes talk to
// each other over TLS too, and a node asked for the slot map over TLS
// answers with its peers' TLS ports, so a client seeded with one TLS
// address only ever reaches TLS ports.
type TLS struct {
	// Certs are the files the server presents and trusts: it serves
	// Certs.ServerCert and trusts client certificates signed by Certs.CA.
	Certs Certs
	// ClientAuth makes the TLS port require a client certificate (mutual
	// TLS). False accepts clients without one.
	ClientAuth bool
}

func (t TLS) args(port int, cluster bool) []string {
	auth := "no"
	if t.ClientAuth {
		auth = "yes"
	}
	a := []string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", t.Certs.ServerCert,
		"--tls-key-file", t.Certs.ServerKey,
		"--tls-ca-cert-file", t.Certs.CA,
		"--tls-auth-clients", auth,
	}
	if cluster {
		a = append(a, "--tls-cluster", "yes", "--tls-replication", "yes")
	}
	return a
}

// TLSAddr returns the address of the server's TLS port, "127.0.0.1:port",
// or "" for a server started without one.
func (s *Server) TLSAddr() string {
	i := slices.Index(s.args, "--tls-port")
	if i < 0 || i+1 >= len(s.args) {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", s.args[i+1])
}

// StandaloneTLS is Standalone with a TLS port set up by tls.
func StandaloneTLS(t TB, tls TLS) *Server {
	t.Helper()
	return startFor(t, func(dir string) (*Server, error) { return startTLSOnFreePort(dir, false, tls) })
}

// StartClusterTLS is StartCluster with a TLS port on every node, set up by
// tls. TLSAddrs are the seeds for a client.
func StartClusterTLS(t TB, primaries, replicasPerPrimary int, tls TLS) *Cluster {
	t.Helper()
	c, stop, err := newCluster(primaries, replicasPerPrimary, func(dir string) (*Server, error) {
		return startTLSOnFreePort(dir, true, tls)
	})
	if err != nil {
		t.Fatalf("redistest: TLS %v", err)
	}
	t.Cleanup(stop)
	return c
}

// TLSAddrs returns the TLS address of every node, in the order of Addrs;
// empty strings for a cluster started without TLS.
func (c *Cluster) TLSAddrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.TLSAddr()
	}
	return out
}

// startTLSOnFreePort is startOnFreePort with a TLS port too, retried on
// another port when it was taken.
func startTLSOnFreePort(dir string, cluster bool, tls TLS) (*Server, error) {
	if tls.Certs.ServerCert == "" {
		return nil, errors.New("TLS server without certificates: make them with NewCerts")
	}
	s, err := onFreePort(4, false, func(port int) (*Server, error) {
		return startOnFreePort(dir, cluster, tls.args(port, cluster))
	})
	if errors.Is(err, errPortTaken) {
		return nil, fmt.Errorf("TLS port: %w", err)
	}
	return s, err
}
