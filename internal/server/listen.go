// The listeners a Server runs, and its graceful shutdown.

package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/sluicehq/sluice/internal/rls"
)

// Listener names, for Addr.
const (
	ListenerGateway     = "gateway"      // Options.Listen, when there is an upstream
	ListenerAdmin       = "admin"        // Options.Admin
	ListenerForwardAuth = "forward_auth" // ForwardAuthOptions.Listen
	ListenerGRPC        = "grpc"         // ServiceOptions.GRPC
	ListenerServiceHTTP = "service_http" // ServiceOptions.HTTP
)

// Addr returns the bound address of the named listener (ListenerGateway
// and the others) once Run listens, or nil if it does not run.
func (g *Server) Addr(name string) net.Addr {
	if a, ok := g.addrs.Load().(map[string]net.Addr); ok {
		return a[name]
	}
	return nil
}

// Run listens on the configured addresses and serves until ctx is done,
// then shuts down gracefully, in this order:
//
//  1. /readyz turns 503 and the service's health (gRPC and /healthcheck)
//     NOT_SERVING, at once, while every listener still serves; the HTTP
//     listeners other than the admin one stop keeping connections alive.
//  2. For ShutdownDelay (none by default), they go on serving, so that
//     load balancers see "not ready" and stop sending before connections
//     are refused.
//  3. The gateway's, forward-auth's and the service's listeners stop
//     accepting, and their requests and calls in flight get up to
//     ShutdownTimeout to finish; past it they are cut off.
//  4. Only then does the admin listener close, so that readiness and
//     metrics are served until the last request has drained.
//
// A listener that fails ends the serving as ctx would, without the delay.
// Run calls ready, if non-nil, with the bound addresses of the gateway (nil
// without an upstream) and admin listeners once every listener listens;
// Addr tells the others.
func (g *Server) Run(ctx context.Context, ready func(listen, admin net.Addr)) error {
	type listener struct {
		name, addr string
		srv        *http.Server
	}
	var want []listener
	if g.opts.Upstream != "" {
		want = append(want, listener{ListenerGateway, g.opts.Listen, g.server(g.handler)})
	}
	if g.opts.Admin != "" {
		want = append(want, listener{ListenerAdmin, g.opts.Admin, g.server(g.admin)})
	}
	if fa := g.opts.ForwardAuth; fa != nil {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.gen.Load().fa.ServeHTTP(w, r) })
		want = append(want, listener{ListenerForwardAuth, fa.Listen, g.server(h)})
	}
	var (
		grpcSrv *grpc.Server
		health  *health.Server
		grpcLn  net.Listener
	)
	if g.opts.Service != nil {
		svc := rls.Current(func() *rls.Service { return g.gen.Load().svc })
		var gopts []grpc.ServerOption
		if g.tracing != nil {
			gopts = append(gopts, grpc.ChainUnaryInterceptor(g.tracing.unary))
		}
		grpcSrv, health = rls.NewGRPCServer(svc, gopts...)
		if a := g.opts.Service.HTTP; a != "" {
			want = append(want, listener{ListenerServiceHTTP, a, g.server(rls.HTTPHandler(svc, health))})
		}
	}
	addrs := map[string]net.Addr{}
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
		if grpcLn != nil {
			grpcLn.Close()
		}
	}
	for _, l := range want {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("server: %s listener: %w", l.name, err)
		}
		lns = append(lns, ln)
		addrs[l.name] = ln.Addr()
	}
	if grpcSrv != nil && g.opts.Service.GRPC != "" {
		ln, err := net.Listen("tcp", g.opts.Service.GRPC)
		if err != nil {
			closeAll()
			return fmt.Errorf("server: %s listener: %w", ListenerGRPC, err)
		}
		grpcLn = ln
		addrs[ListenerGRPC] = ln.Addr()
	}
	g.addrs.Store(addrs)
	attrs := []any{}
	for _, n := range []string{ListenerGateway, ListenerAdmin, ListenerForwardAuth, ListenerGRPC, ListenerServiceHTTP} {
		if a := addrs[n]; a != nil {
			key := n
			if n == ListenerGateway {
				key = "listen"
			}
			attrs = append(attrs, key, a.String())
		}
	}
	if g.opts.Upstream != "" {
		attrs = append(attrs, "upstream", redact(g.opts.Upstream))
	}
	g.log.Info("sluice listening", attrs...)
	if ready != nil {
		ready(addrs[ListenerGateway], addrs[ListenerAdmin])
	}
	errc := make(chan error, len(want)+1)
	var wg sync.WaitGroup
	for i, l := range want {
		wg.Go(func() {
			if err := l.srv.Serve(lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: %s listener: %w", l.name, err)
			}
		})
	}
	if grpcLn != nil {
		wg.Go(func() {
			if err := grpcSrv.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("server: %s listener: %w", ListenerGRPC, err)
			}
		})
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	g.draining.Store(true)
	if health != nil {
		health.Shutdown()
	}
	var admin *http.Server
	traffic := make([]listener, 0, len(want))
	for _, l := range want {
		if l.name == ListenerAdmin {
			admin = l.srv
			continue
		}
		l.srv.SetKeepAlivesEnabled(false)
		traffic = append(traffic, l)
	}
	timeout := time.Duration(g.shutdown.Load())
	delay := max(time.Duration(g.delay.Load()), 0)
	if runErr != nil {
		delay = 0
	}
	g.log.Info("sluice shutting down", "delay", delay, "timeout", timeout)
	if delay > 0 {
		<-g.after(delay)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		sw   sync.WaitGroup
	)
	shutdown := func(name string, srv *http.Server) {
		if err := srv.Shutdown(sctx); err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("server: shutdown of the %s listener: %w", name, err))
			mu.Unlock()
			srv.Close()
		}
	}
	for _, l := range traffic {
		sw.Go(func() { shutdown(l.name, l.srv) })
	}
	if grpcSrv != nil {
		sw.Go(func() {
			if err := rls.Shutdown(sctx, grpcSrv, health); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("server: shutdown of the %s listener: %w", ListenerGRPC, err))
				mu.Unlock()
			}
		})
	}
	sw.Wait()
	if admin != nil {
		// What is left of the timeout; a scrape in flight when it is
		// spent is cut off, an idle connection simply closed.
		shutdown(ListenerAdmin, admin)
	}
	wg.Wait()
	err := errors.Join(append([]error{runErr}, errs...)...)
	if err != nil {
		g.log.Error("sluice stopped", "error", err)
	} else {
		g.log.Info("sluice stopped")
	}
	return err
}

func (g *Server) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: g.opts.ReadHeaderTimeout,
		ReadTimeout:       g.opts.ReadTimeout,
		IdleTimeout:       g.opts.IdleTimeout,
		MaxHeaderBytes:    g.opts.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}
