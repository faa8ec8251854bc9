package cli

import (
	"fmt"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/gateway"
)

// options maps a config file onto the gateway's options.
func options(cfg *config.Config) (gateway.Options, error) {
	ip, err := clientip.New(cfg.ClientIP)
	if err != nil {
		return gateway.Options{}, fmt.Errorf("client_ip: %w", err)
	}
	lo := cfg.Limiter
	lo.ClientIP = ip
	return gateway.Options{
		Listen:            cfg.Server.Listen,
		Admin:             cfg.Server.Admin,
		Upstream:          cfg.Upstream,
		ShutdownTimeout:   cfg.Server.ShutdownTimeout,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		Backend:           cfg.Store.Backend,
		MaxKeys:           cfg.Store.MaxKeys,
		Redis:             cfg.Store.Redis,
		Limiter:           lo,
		LogLinesPerSecond: cfg.RejectionLogsPerSecond,
		AdminAllowRemote:  cfg.Admin.AllowRemote,
	}, nil
}

// check validates the file and summarises it.
func check(path string) (summary string, warnings []string, err error) {
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
	if cfg.Limiter.Tiers.From.Source != 0 && cfg.Limiter.Tiers.Keys == nil {
		warnings = append(warnings, fmt.Sprintf("tiers come from %s as sent: make sure a trusted layer in front sets it, or clients can pick their own tier", cfg.Limiter.Tiers.From))
	}
	return fmt.Sprintf("%d rules, store %s, upstream %s", len(cfg.Limiter.Rules), cfg.Store.Backend, cfg.Upstream), warnings, nil
}
