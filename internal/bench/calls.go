package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/redisstore"
)

// scriptCommands are the commands a limiter decision runs as, in INFO
// commandstats: FCALL on Redis 7, EVALSHA (or EVAL) before.
var scriptCommands = []string{"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro"}

// callCounter counts the script calls Redis nodes ran, by reading INFO
// commandstats from each: what every gateway cost Redis, background lease
// refills included, with no hook in the stack. A node that does not answer
// (paused, killed) is skipped until it does; one that restarted counts
// from zero again.
type callCounter struct {
	clients map[string]rueidis.Client
	last    map[string]int64
}

func newCallCounter(ctx context.Context, addrs []string, rc redisstore.Config) (*callCounter, error) {
	c := &callCounter{clients: map[string]rueidis.Client{}, last: map[string]int64{}}
	for _, a := range addrs {
		cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true,
			DisableCache: true, DisableRetry: true, Dialer: net.Dialer{Timeout: time.Second},
			Username: rc.Username, Password: rc.Password, TLSConfig: rc.TLS})
		if err != nil {
			c.close()
			return nil, fmt.Errorf("count redis calls on %s: %w", a, err)
		}
		c.clients[a] = cl
	}
	if _, err := c.read(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// read returns the script calls run since the last read.
func (c *callCounter) read(ctx context.Context) (int64, error) {
	var total int64
	var firstErr error
	for a, cl := range c.clients {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		s, err := cl.Do(cctx, cl.B().Info().Section("commandstats").Build()).ToString()
		cancel()
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("count redis calls on %s: INFO commandstats: %w", a, err)
			}
			continue
		}
		n := scriptCalls(s)
		prev, seen := c.last[a]
		c.last[a] = n
		switch {
		case !seen:
		case n >= prev:
			total += n - prev
		default: // restarted
			total += n
		}
	}
	return total, firstErr
}

func (c *callCounter) close() {
	for _, cl := range c.clients {
		cl.Close()
	}
}

// scriptCalls sums the calls of scriptCommands in an INFO commandstats
// reply: lines like "cmdstat_fcall:calls=12,usec=...".
func scriptCalls(info string) int64 {
	var n int64
	for line := range strings.FieldsSeq(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		for _, cmd := range scriptCommands {
			if strings.EqualFold(name, cmd) {
				v, _, _ := strings.Cut(rest, ",")
				if x, err := strconv.ParseInt(v, 10, 64); err == nil {
					n += x
				}
			}
		}
	}
	return n
}
