package rls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ServiceName is the gRPC service the Service implements, and the name
// it answers health checks for (as does the empty name).
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// NewGRPCServer returns a gRPC server serving s, the standard health
// service (SERVING for ServiceName and the whole server) and, if
// reflection is set, server reflection. Call health's Shutdown before the
// server's GracefulStop so that health checks see NOT_SERVING first.
func NewGRPCServer(s *Service, reflect bool, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	g := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(g, s)
	h := health.NewServer()
	h.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	if reflect {
		reflection.Register(g)
	}
	return g, h
}
