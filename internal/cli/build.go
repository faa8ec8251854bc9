package cli

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/internal/identity"
	"github.com/sluicehq/sluice/internal/rls"
)

// options maps a config file onto the gateway's options.
func options(cfg *config.Config) (gateway.Options, error) {
	ip, err := clientip.New(cfg.ClientIP)
	if err != nil {
		return gateway.Options{}, fmt.Errorf("client_ip: %w", err)
	}
	lo := cfg.Limiter
	lo.ClientIP = ip
	host := gateway.HostUpstream
	if cfg.Proxy.PreserveHost {
		host = gateway.HostPreserve
	}
	var id *identity.Options
	if cfg.JWT != nil {
		o := cfg.JWT.Options()
		id = &o
	}
	return gateway.Options{
		Listen:            cfg.Server.Listen,
		Admin:             cfg.Server.Admin,
		Upstream:          cfg.Upstream,
		ShutdownTimeout:   cfg.Server.ShutdownTimeout,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		Proxy: gateway.ProxyOptions{
			DialTimeout:           cfg.Proxy.DialTimeout,
			ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout,
			IdleConnTimeout:       cfg.Proxy.IdleTimeout,
			Host:                  host,
		},
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		Backend:           cfg.Store.Backend,
		MaxKeys:           cfg.Store.MaxKeys,
		Redis:             cfg.Store.Redis,
		Limiter:           lo,
		LogLinesPerSecond: cfg.RejectionLogsPerSecond,
		AdminAllowRemote:  cfg.Admin.AllowRemote,
		Service:           serviceOptions(cfg.Service),
		ForwardAuth:       forwardAuthOptions(cfg.Server.ForwardAuth),
		Identity:          id,
	}, nil
}

// serviceOptions maps the service section onto the gateway's options.
func serviceOptions(s *config.Service) *gateway.ServiceOptions {
	if s == nil {
		return nil
	}
	o := &gateway.ServiceOptions{GRPC: s.GRPC, HTTP: s.HTTP, Rules: s.Rules, OnStoreError: rls.FailUnavailable, Anchor: s.Anchor}
	if s.DecideOnError {
		o.OnStoreError = rls.FailOnError
	}
	for _, h := range s.Headers {
		switch h {
		case "ietf":
			o.Headers |= rls.HeadersIETF
		case "legacy":
			o.Headers |= rls.HeadersLegacy
		case "retry_after":
			o.Headers |= rls.HeadersRetryAfter
		case "envoy":
			o.Headers |= rls.HeadersEnvoy
			o.EnvoyHeaderNames = rls.EnvoyHeaderNames(s.EnvoyHeaders)
		}
	}
	if o.Headers == 0 {
		o.Headers = rls.HeadersOff
	}
	return o
}

// forwardAuthOptions maps server.forward_auth onto the gateway's options.
func forwardAuthOptions(fa *config.ForwardAuth) *gateway.ForwardAuthOptions {
	if fa == nil {
		return nil
	}
	return &gateway.ForwardAuthOptions{Listen: fa.Listen, TrustedProxies: fa.TrustedProxies}
}

// check validates the file and summarises it.
func check(path string) (summary string, warns []string, err error) {
	cfg, err := config.Load(path)
	if err != nil {
		return "", nil, err
	}
	if _, err := options(cfg); err != nil {
		return "", nil, err
	}
	if cfg.Admin.API {
		if _, err := cfg.Admin.Token(path); err != nil {
			return "", nil, err
		}
	}
	return summarize(cfg), warnings(cfg), nil
}

// summarize says in a few words what a valid file runs.
func summarize(cfg *config.Config) string {
	var parts []string
	if cfg.Gateway() {
		parts = append(parts, fmt.Sprintf("gateway to %s", cfg.Upstream))
	}
	if fa := cfg.Server.ForwardAuth; fa != nil {
		parts = append(parts, "forward-auth on "+fa.Listen)
	}
	if len(cfg.Limiter.Rules) > 0 {
		parts = append(parts, fmt.Sprintf("%d rules", len(cfg.Limiter.Rules)))
	}
	if s := cfg.Service; s != nil {
		n := 0
		if s.Rules != nil {
			n = len(s.Rules.Domains())
		}
		parts = append(parts, fmt.Sprintf("rate-limit service with %d domains", n))
	}
	return strings.Join(append(parts, "store "+cfg.Store.Backend), ", ")
}

// warnings lists the settings of a valid file that are risky: check-config
// prints them and serve logs them at WARN.
func warnings(cfg *config.Config) []string {
	var ws []string
	if j := cfg.JWT; j != nil {
		var missing []string
		if j.Issuer == "" {
			missing = append(missing, "issuer")
		}
		if j.Audience == "" {
			missing = append(missing, "audience")
		}
		if len(missing) > 0 {
			ws = append(ws, fmt.Sprintf("identity.jwt has no %s: any token the keys signed is accepted, including ones issued for other services", strings.Join(missing, " and ")))
		}
	}
	if src := cfg.Limiter.Tiers.From.Source; src != 0 && src != httplimit.SourceJWT && cfg.Limiter.Tiers.Keys == nil {
		ws = append(ws, fmt.Sprintf("tiers come from %s as sent: make sure a trusted layer in front sets it, or clients can pick their own tier", cfg.Limiter.Tiers.From))
	}
	return ws
}
