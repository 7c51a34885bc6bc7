package pipeline

import "context"

// Down reports the Redis nodes that do not answer now (a PING each, bounded
// by ctx), for readiness checks: the seeds, as one node, while the store
// has not yet connected (New starts without Redis; see redisstore.New),
// and afterwards every primary that does not answer. Nil means every node
// answered, or the pipeline counts in process. The stack serves either
// way: keys of a node that is down are limited locally.
func (p *Pipeline) Down(ctx context.Context) []string {
	if p.redis == nil {
		return nil
	}
	return p.redis.Down(ctx)
}
