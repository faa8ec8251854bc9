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
	opts, tokenFile, err := loadOptions(path, data)
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
	wg.Go(func() { reloadLoop(rctx, g, w, path, tokenFile, hup, logger) })
	err = g.Run(ctx, ready)
	stop()
	wg.Wait()
	if err != nil {
		return 1
	}
	return 0
}

// reloadLoop reloads g from path on each SIGHUP and each change of the
// file's content or of the admin token file's (tokenFile, if any), one
// reload at a time, until ctx is done.
func reloadLoop(ctx context.Context, g *gateway.Gateway, w *filewatch.Watcher, path, tokenFile string, hup <-chan os.Signal, logger *slog.Logger) {
	var token *filewatch.Watcher
	watchToken := func(file string) {
		token = nil
		if file != "" {
			token = filewatch.New(file, nil, 1<<20)
			_, _ = token.Read() // a missing file is the reload's problem
		}
	}
	watchToken(tokenFile)
	reload := func(data []byte, readErr error) {
		var file string
		err := g.Reload(func() (gateway.Options, error) {
			if readErr != nil {
				return gateway.Options{}, fmt.Errorf("config: %w", readErr)
			}
			opts, f, err := loadOptions(path, data)
			file = f
			return opts, err
		})
		if err == nil {
			watchToken(file)
		}
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
				if token == nil {
					break
				}
				if _, changed, _ := token.Changed(); changed {
					logger.Info("the admin token file changed: reloading the configuration", "config", path)
					data, err := w.Read()
					reload(data, err)
				}
			}
		}
	}
}

// loadOptions parses data, the content of the config file at path, into
// the gateway's options, with the same messages as check-config, and
// returns the path of the admin token file it read, if any.
func loadOptions(path string, data []byte) (gateway.Options, string, error) {
	cfg, err := config.Parse(data, path)
	if err != nil {
		return gateway.Options{}, "", err
	}
	opts, err := options(cfg)
	if err != nil {
		return gateway.Options{}, "", err
	}
	var tokenFile string
	if cfg.Admin.API {
		if opts.AdminToken, err = cfg.Admin.Token(path); err != nil {
			return gateway.Options{}, "", err
		}
		tokenFile = cfg.Admin.TokenPath(path)
	}
	opts.ConfigHash = configHash(data)
	return opts, tokenFile, nil
}

// configHash is the first 16 hex digits of the SHA-256 of a config file.
func configHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
