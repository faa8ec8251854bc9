package cli

import (
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/gateway"
)

// build loads the config file and builds the gateway it describes, logging
// check-config's warnings about the file at WARN.
func build(path string, logger *slog.Logger) (*gateway.Gateway, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	opts, err := options(cfg)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings(cfg) {
		logger.Warn(w, "config", path)
	}
	opts.Logger = logger
	return gateway.New(opts)
}

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
	}, nil
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
	return fmt.Sprintf("%d rules, store %s, upstream %s", len(cfg.Limiter.Rules), cfg.Store.Backend, cfg.Upstream), warnings(cfg), nil
}

// warnings lists the settings of a valid file that are risky: check-config
// prints them and serve logs them at WARN.
func warnings(cfg *config.Config) []string {
	var ws []string
	if cfg.Limiter.Tiers.From.Source != 0 && cfg.Limiter.Tiers.Keys == nil {
		ws = append(ws, fmt.Sprintf("tiers come from %s as sent: make sure a trusted layer in front sets it, or clients can pick their own tier", cfg.Limiter.Tiers.From))
	}
	return ws
}
