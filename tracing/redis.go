package tracing

import (
	"context"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// RedisSpan is the name of the span of one Redis command (or of one
// pipeline, for DoMulti) that sluice's Redis client sends.
const RedisSpan = "sluice.redis"

// Redis returns c with a client span for each Do and DoMulti, a child of
// the span in the call's context: redisstore's take (FCALL or EVALSHA)
// then shows under its decision span. With a nil tp it returns c itself.
// Other methods are c's own and record nothing. The span names the
// command, never its keys or arguments, which hold API keys. Give it to
// redisstore.Config.Wrap; the result is safe for concurrent use, as c is.
func Redis(c rueidis.Client, tp trace.TracerProvider) rueidis.Client {
	if tp == nil {
		return c
	}
	return &redisClient{Client: c, tracer: tp.Tracer(ScopeName)}
}

type redisClient struct {
	rueidis.Client
	tracer trace.Tracer
}

var redisSystem = attribute.String("db.system.name", "redis")

func (c *redisClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	name := commandName(&cmd) // read before Do, which recycles cmd
	ctx, span := c.tracer.Start(ctx, RedisSpan, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(redisSystem, attribute.String("db.operation.name", name)))
	resp := c.Client.Do(ctx, cmd)
	endRedis(span, resp.Error())
	return resp
}

func (c *redisClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	name := "PIPELINE"
	if len(cmds) > 0 {
		name += " " + commandName(&cmds[0])
	}
	ctx, span := c.tracer.Start(ctx, RedisSpan, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(redisSystem, attribute.String("db.operation.name", name), attribute.Int("db.operation.batch.size", len(cmds))))
	resps := c.Client.DoMulti(ctx, cmds...)
	var err error
	for _, r := range resps {
		if err = r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			break
		}
	}
	endRedis(span, err)
	return resps
}

// commandName is the command's first word, such as FCALL.
func commandName(cmd *rueidis.Completed) string {
	if words := cmd.Commands(); len(words) > 0 {
		return words[0]
	}
	return ""
}

// endRedis ends span, marked failed for err unless err is Redis's nil reply.
func endRedis(span trace.Span, err error) {
	if err != nil && !rueidis.IsRedisNil(err) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
