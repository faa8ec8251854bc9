package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/filewatch"
	"github.com/sluicehq/sluice/internal/identity"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/server"
)

// options maps a config file onto the gateway's options.
func options(cfg *config.Config) (server.Options, error) {
	lo, err := cfg.LimiterOptions()
	if err != nil {
		return server.Options{}, err
	}
	host := proxy.HostUpstream
	if cfg.Proxy.PreserveHost {
		host = proxy.HostPreserve
	}
	var id *identity.Options
	if cfg.JWT != nil {
		o := cfg.JWT.Options()
		id = &o
	}
	return server.Options{
		Listen:            cfg.Server.Listen,
		Admin:             cfg.Server.Admin,
		Upstream:          cfg.Upstream,
		ShutdownTimeout:   cfg.Server.ShutdownTimeout,
		ShutdownDelay:     cfg.Server.ShutdownDelay,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		ReadTimeout:       cfg.Server.ReadTimeout,
		IdleTimeout:       cfg.Server.IdleTimeout,
		Proxy: proxy.Options{
			DialTimeout:           cfg.Proxy.DialTimeout,
			ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout,
			IdleConnTimeout:       cfg.Proxy.IdleTimeout,
			Host:                  host,
		},
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		Backend:           cfg.Store.Backend,
		MaxKeys:           cfg.Store.MaxKeys,
		Redis:             cfg.Store.Redis,
		BackendOptions:    cfg.Store.Options,
		Limiter:           lo,
		LogLinesPerSecond: cfg.RejectionLogsPerSecond,
		AdminAllowRemote:  cfg.Admin.AllowRemote,
		AdminShowKeys:     cfg.Admin.ShowKeys,
		AccessLog:         accessLogOptions(cfg.AccessLog),
		Tracing:           tracingOptions(cfg.Tracing),
		Service:           serviceOptions(cfg.Service),
		ForwardAuth:       forwardAuthOptions(cfg.Server.ForwardAuth),
		Identity:          id,
	}, nil
}

// accessLogOptions maps log.access onto the gateway's options.
func accessLogOptions(a *config.AccessLog) *server.AccessLogOptions {
	if a == nil {
		return nil
	}
	return &server.AccessLogOptions{Output: a.Output, LinesPerSecond: a.LinesPerSecond, MaxSize: a.MaxSize, MaxBackups: a.MaxBackups, RawKeys: a.RawKeys}
}

// tracingOptions maps the tracing section onto the gateway's options.
func tracingOptions(t *config.Tracing) *server.TracingOptions {
	if t == nil {
		return nil
	}
	return &server.TracingOptions{Endpoint: t.Endpoint, SampleRatio: t.SampleRatio, ServiceName: t.ServiceName}
}

// serviceOptions maps the service section onto the gateway's options.
func serviceOptions(s *config.Service) *server.ServiceOptions {
	if s == nil {
		return nil
	}
	o := &server.ServiceOptions{GRPC: s.GRPC, HTTP: s.HTTP, Rules: s.Rules, OnStoreError: rls.FailUnavailable, Anchor: s.Anchor}
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
func forwardAuthOptions(fa *config.ForwardAuth) *server.ForwardAuthOptions {
	if fa == nil {
		return nil
	}
	return &server.ForwardAuthOptions{Listen: fa.Listen, TrustedProxies: fa.TrustedProxies}
}

// check validates the file as serve loads it, and summarises it.
func check(path string) (summary string, warns []string, err error) {
	data, err := readConfig(filewatch.New(path, nil, config.MaxSize), path)
	if err != nil {
		return "", nil, err
	}
	_, ld, err := loadOptions(path, data)
	if err != nil {
		return "", nil, err
	}
	return summarize(ld.cfg), ld.warnings, nil
}

// readConfig reads the config file at path through w, wording a file that
// cannot be read the same way for serve and check-config: "PATH: cannot
// read the config file: no such file or directory".
func readConfig(w *filewatch.Watcher, path string) ([]byte, error) {
	data, err := w.Read()
	if err != nil {
		return nil, unreadable(path, "the config file", err)
	}
	return data, nil
}

// unreadable words a file that cannot be read: its path, what it is, and
// why, without the operation the error names ("open PATH: ").
func unreadable(path, what string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: cannot read %s: %w", path, what, err)
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
	if c := overrideClient(cfg); c != "" {
		parts = append(parts, c)
	}
	return strings.Join(append(parts, "store "+cfg.Store.Backend), ", ")
}

// overrideClient says what identifies a client for the admin API's
// per-client overrides when the file leaves it implied (no tiers.client):
// "" when it says so itself, or has no tiers.from and so no overrides.
func overrideClient(cfg *config.Config) string {
	t := cfg.Limiter.Tiers
	switch {
	case t.From == (httplimit.KeyPart{}):
		return ""
	case t.Client == (httplimit.KeyPart{}):
		return fmt.Sprintf("per-client overrides keyed by %s (tiers.from)", t.From)
	case t.From.Source == httplimit.SourceJWT && t.Client == httplimit.JWT("sub"):
		return "per-client overrides keyed by jwt:sub (the token's subject)"
	}
	return ""
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
	t := cfg.Limiter.Tiers
	if src := t.From.Source; src != 0 && src != httplimit.SourceJWT && t.Keys == nil {
		ws = append(ws, fmt.Sprintf("tiers come from %s as sent: make sure a trusted layer in front sets it, or clients can pick their own tier", t.From))
		if t.Client == (httplimit.KeyPart{}) {
			ws = append(ws, fmt.Sprintf("per-client overrides (admin API) are keyed by %s, whose values are tier names, not clients: set tiers.client to what identifies a client, such as header:X-API-Key", t.From))
		}
	}
	if src := cfg.Limiter.Priority.From.Source; src != 0 && src != httplimit.SourceJWT {
		ws = append(ws, fmt.Sprintf("priority classes come from %s as sent: make sure a trusted layer in front sets it and removes it from clients' requests, or clients can make themselves critical", cfg.Limiter.Priority.From))
	}
	return ws
}
