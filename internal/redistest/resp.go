package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ReplyError is an error reply from Redis, such as "MOVED 866 127.0.0.1:7001"
// or "NOSCRIPT No matching script".
type ReplyError string

// Error returns the reply as Redis sent it.
func (e ReplyError) Error() string { return string(e) }

// defaultTimeout bounds a command whose context has no deadline, so that a
// stopped server fails a test instead of hanging it.
const defaultTimeout = 5 * time.Second

// do sends one command to addr on a fresh connection and reads its reply.
//
// The harness speaks RESP itself rather than through rueidis so that it
// checks servers independently of the client the code under test uses, and
// so that one command goes to exactly the node named, with no redirects,
// retries or topology caching in between.
func do(ctx context.Context, addr string, args ...string) (any, error) {
	replies, err := doMulti(ctx, addr, args)
	if err != nil {
		return nil, err
	}
	if re, ok := replies[0].(ReplyError); ok {
		return nil, re
	}
	return replies[0], nil
}

// doMulti sends commands to addr on one fresh connection, in order, and
// returns their replies; an error reply is a ReplyError among them.
func doMulti(ctx context.Context, addr string, cmds ...[]string) ([]any, error) {
	var d net.Dialer
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultTimeout)
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Close the connection if ctx ends first, so a read from a stopped
	// server returns at once.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	buf := make([]byte, 0, 64)
	for _, args := range cmds {
		buf = append(buf, '*')
		buf = strconv.AppendInt(buf, int64(len(args)), 10)
		buf = append(buf, '\r', '\n')
		for _, a := range args {
			buf = append(buf, '$')
			buf = strconv.AppendInt(buf, int64(len(a)), 10)
			buf = append(buf, '\r', '\n')
			buf = append(buf, a...)
			buf = append(buf, '\r', '\n')
		}
	}
	name := cmds[0][0]
	if _, err := conn.Write(buf); err != nil {
		return nil, fmt.Errorf("send %s to %s: %w", name, addr, err)
	}
	r := bufio.NewReader(conn)
	replies := make([]any, len(cmds))
	for i := range replies {
		v, err := readReply(r)
		var re ReplyError
		switch {
		case err == nil:
			replies[i] = v
		case errors.As(err, &re):
			replies[i] = re
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s on %s: %w", cmds[i][0], addr, ctx.Err())
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The connection's deadline is the context's, and may fire first.
			return nil, fmt.Errorf("%s on %s: %w: %w", cmds[i][0], addr, context.DeadlineExceeded, err)
		default:
			return nil, fmt.Errorf("%s on %s: %w", cmds[i][0], addr, err)
		}
	}
	return replies, nil
}

// readReply parses one RESP2 reply: a string (simple or bulk), an int64,
// nil, a []any, or a ReplyError as the error.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, ReplyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("malformed bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("malformed array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				var re ReplyError
				if !errors.As(err, &re) {
					return nil, err
				}
				out[i] = re
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", kind)
}

// infoField returns the value of field in an INFO or CLUSTER INFO reply.
func infoField(info any, field string) string {
	s, _ := info.(string)
	for line := range strings.Lines(s) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v
		}
	}
	return ""
}
