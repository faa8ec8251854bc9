package rls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ServiceName is the gRPC service the rate-limit service implements.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Register registers the service with g.
func Register(g *grpc.Server, d Decider) {
	rlsv3.RegisterRateLimitServiceServer(g, grpcService{d: d})
}

// NewGRPCServer returns a gRPC server with the service, the gRPC health
// service (SERVING for "" and ServiceName) and server reflection
// registered, and the health server, which Shutdown turns NOT_SERVING.
//
// The server handles calls on a pool of streamWorkers goroutines, which
// opts may change with grpc.NumStreamWorkers.
func NewGRPCServer(d Decider, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	opts = append([]grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers())}, opts...)
	g := grpc.NewServer(opts...)
	Register(g, d)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	reflection.Register(g)
	return g, h
}

// streamWorkers is the size of the gRPC server's pool of goroutines for
// calls: 32 per GOMAXPROCS, at most 1024. A call that finds a worker free
// runs on it; one that finds none runs on a goroutine of its own, as
// without the pool. A goroutine of its own starts with a small stack that
// the gRPC server's handling of a call outgrows, and copying it cost about
// a tenth of the service's CPU at 64 callers on Redis, where every call
// waits for Redis while it holds its goroutine; a worker keeps its grown
// stack from call to call (up to a few tens of KB each, idle).
func streamWorkers() uint32 {
	return uint32(min(32*runtime.GOMAXPROCS(0), 1024))
}

// HTTPHandler returns the handler of the service's HTTP listener:
// POST /json (JSONHandler) and GET /healthcheck, which answers 200 "OK"
// while the service is serving, as envoyproxy/ratelimit's does.
func HTTPHandler(d Decider, h *health.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/json", JSONHandler(d))
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if h != nil {
			res, err := h.Check(r.Context(), &healthpb.HealthCheckRequest{})
			if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
				http.Error(w, "NOT SERVING", http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("OK"))
	})
	return mux
}

// Serve serves the gRPC service on grpcLn and, if httpLn is non-nil, the
// HTTP handler on it, until ctx is done or a listener fails. It then shuts
// down: health turns NOT_SERVING, the listeners stop accepting, and calls in
// flight get up to shutdownTimeout to finish before they are cut off. It
// returns nil after a clean shutdown; ErrShutdownTimeout if calls had to
// be cut off.
func (s *Service) Serve(ctx context.Context, grpcLn, httpLn net.Listener, shutdownTimeout time.Duration) error {
	g, h := NewGRPCServer(s)
	var hs *http.Server
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := g.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("rls: grpc: %w", err)
		}
	})
	if httpLn != nil {
		hs = &http.Server{Handler: HTTPHandler(s, h), ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			if err := hs.Serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("rls: http: %w", err)
			}
		})
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	var errs []error
	if hs != nil {
		wg.Go(func() {
			if err := hs.Shutdown(sctx); err != nil {
				hs.Close()
			}
		})
	}
	errs = append(errs, runErr, Shutdown(sctx, g, h))
	wg.Wait()
	return errors.Join(errs...)
}

// ErrShutdownTimeout reports a shutdown that had to cut calls off.
var ErrShutdownTimeout = errors.New("rls: shutdown timed out; calls in flight were cut off")

// Shutdown stops g gracefully: h (if non-nil) turns NOT_SERVING, g stops
// accepting and waits for the calls in flight; if ctx is done first, g is
// stopped at once, those calls fail, and Shutdown returns
// ErrShutdownTimeout.
func Shutdown(ctx context.Context, g *grpc.Server, h *health.Server) error {
	if h != nil {
		h.Shutdown()
	}
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		g.Stop()
		<-done
		return ErrShutdownTimeout
	}
}
