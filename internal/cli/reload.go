package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/filewatch"
	"github.com/sluicehq/sluice/internal/gateway"
)

// pollInterval is how often serve checks the config file for a change.
const pollInterval = time.Second

// runGateway serves the config file at path until ctx is done, reloading
// it on SIGHUP and whenever its content changes (see package filewatch).
// It returns the process exit code.
func runGateway(ctx context.Context, path string, logger *slog.Logger, stderr io.Writer, ready func(listen, admin net.Addr)) int {
	// SIGHUP is taken before anything else, so that a reload sent while
	// the gateway starts is not the default action's exit.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	w := filewatch.New(path, nil, config.MaxSize)
	data, err := w.Read()
	if err != nil {
		fmt.Fprintln(stderr, "config:", err)
		return 1
	}
	opts, err := loadOptions(path, data)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	opts.Logger = logger
	g, err := gateway.New(opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer g.Close()

	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { reloadLoop(rctx, g, w, path, hup, logger) })
	err = g.Run(ctx, ready)
	stop()
	wg.Wait()
	if err != nil {
		return 1
	}
	return 0
}

// reloadLoop reloads g from path on each SIGHUP and each change of the
// file's content, one reload at a time, until ctx is done.
func reloadLoop(ctx context.Context, g *gateway.Gateway, w *filewatch.Watcher, path string, hup <-chan os.Signal, logger *slog.Logger) {
	reload := func(data []byte, readErr error) {
		_ = g.Reload(func() (gateway.Options, error) {
			if readErr != nil {
				return gateway.Options{}, fmt.Errorf("config: %w", readErr)
			}
			return loadOptions(path, data)
		})
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var lastErr string // the file's last read error, logged once
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			logger.Info("SIGHUP: reloading the configuration", "config", path)
			data, err := w.Read()
			reload(data, err)
		case <-t.C:
			data, changed, err := w.Changed()
			switch {
			case err != nil:
				if err.Error() != lastErr {
					logger.Warn("cannot read the config file to look for changes; the running configuration stays", "error", err)
					lastErr = err.Error()
				}
			case changed:
				lastErr = ""
				logger.Info("the config file changed: reloading it", "config", path)
				reload(data, nil)
			default:
				lastErr = ""
			}
		}
	}
}

// loadOptions parses data, the content of the config file at path, into
// the gateway's options, with the same messages as check-config.
func loadOptions(path string, data []byte) (gateway.Options, error) {
	cfg, err := config.Parse(data, path)
	if err != nil {
		return gateway.Options{}, err
	}
	opts, err := options(cfg)
	if err != nil {
		return gateway.Options{}, err
	}
	if cfg.Admin.API {
		if opts.AdminToken, err = cfg.Admin.Token(path); err != nil {
			return gateway.Options{}, err
		}
	}
	opts.ConfigHash = configHash(data)
	return opts, nil
}

// configHash is the first 16 hex digits of the SHA-256 of a config file.
func configHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
