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
	"github.com/sluicehq/sluice/internal/server"
)

// pollInterval is how often serve checks the config file for a change.
const pollInterval = time.Second

// pollTicks returns the channel whose ticks make serve check its files for
// a change, and the function that stops it: a ticker of pollInterval.
// Tests replace it (export_test.go) to tick by hand, so that they need not
// wait for the ticker.
var pollTicks = func() (<-chan time.Time, func()) {
	t := time.NewTicker(pollInterval)
	return t.C, t.Stop
}

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
	data, err := readConfig(w, path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	opts, ld, err := loadOptions(path, data)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// The named files as loaded: summed now, before anything is served,
	// so that a change made once the gateway answers is always seen (the
	// reload loop's goroutine may start later than that).
	filesSum := sumFiles(ld.files)
	for _, w := range ld.warnings {
		logger.Warn(w, "config", path)
	}
	opts.Logger = logger
	g, err := server.New(opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer g.Close()

	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { reloadLoop(rctx, g, w, ld.files, filesSum, path, hup, logger) })
	// Once every listener listens, the gateway logs how it stops, an
	// error included; before that (a port in use, an address this host
	// does not have) it returns the error to be told here.
	listening := false
	err = g.Run(ctx, func(listen, admin net.Addr) {
		listening = true
		if ready != nil {
			ready(listen, admin)
		}
	})
	stop()
	wg.Wait()
	if err != nil {
		if !listening {
			fmt.Fprintf(stderr, "sluice serve: cannot start: %v\n", err)
		}
		return 1
	}
	return 0
}

// reloadLoop reloads g from path on each SIGHUP and each change of the
// file's content or of the files it names (the descriptor files, the lists'
// files, identity.jwt's key files, the admin token file), one reload at a
// time, until ctx is done. filesSum is sumFiles(files) as of the running
// configuration's load.
func reloadLoop(ctx context.Context, g *server.Server, w *filewatch.Watcher, files func() []string, filesSum [sha256.Size]byte, path string, hup <-chan os.Signal, logger *slog.Logger) {
	reload := func(data []byte, readErr error) {
		_ = g.Reload(func() (server.Options, error) {
			if readErr != nil {
				return server.Options{}, unreadable(path, "the config file", readErr)
			}
			opts, ld, err := loadOptions(path, data)
			if err == nil {
				files, filesSum = ld.files, sumFiles(ld.files)
				for _, w := range ld.warnings {
					logger.Warn(w, "config", path)
				}
			}
			return opts, err
		})
	}
	ticks, stop := pollTicks()
	defer stop()
	var lastErr string // the file's last read error, logged once
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			logger.Info("SIGHUP: reloading the configuration", "config", path)
			data, err := w.Read()
			reload(data, err)
		case <-ticks:
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
				if files != nil && sumFiles(files) != filesSum {
					logger.Info("a file the configuration names changed: reloading it", "config", path)
					data, err := w.Read()
					reload(data, err)
				}
			}
		}
	}
}

// loaded is what loading a config file tells besides the gateway's
// options: its warnings, and how to list the files it names (the
// descriptor files, the lists' files and the admin token file; nil when it
// names none),
// whose changes reload it too, so that a rotated token or a changed
// descriptor applies within a second.
type loaded struct {
	cfg      *config.Config
	warnings []string
	files    func() []string
}

// loadOptions parses data, the content of the config file at path, and the
// descriptor files it names into the gateway's options, with the same
// messages as check-config.
func loadOptions(path string, data []byte) (server.Options, loaded, error) {
	cfg, err := config.ParseFile(data, path)
	if err != nil {
		return server.Options{}, loaded{}, err
	}
	opts, err := options(cfg)
	if err != nil {
		return server.Options{}, loaded{}, err
	}
	if cfg.Admin.API {
		if opts.AdminToken, err = cfg.Admin.Token(path); err != nil {
			return server.Options{}, loaded{}, err
		}
	}
	ld := loaded{cfg: cfg, warnings: warnings(cfg)}
	var token string
	if cfg.Admin.API {
		token = cfg.Admin.TokenPath(path)
	}
	lists := append(cfg.ListFiles(path), cfg.JWTKeyFiles(path)...)
	if svc := cfg.Service; svc != nil || token != "" || len(lists) > 0 {
		ld.files = func() []string {
			var fs []string
			if token != "" {
				fs = append(fs, token)
			}
			fs = append(fs, lists...)
			if svc != nil {
				// A directory that cannot be listed now lists what it
				// can; the reload it triggers reports the error.
				more, _ := svc.Files(path)
				fs = append(fs, more...)
			}
			return fs
		}
	}
	opts.ConfigHash = configHash(data)
	return opts, ld, nil
}

// sumFiles returns a digest of the names and contents of the files list
// returns; a file that cannot be read counts as empty, so that its return
// counts as a change. A nil list sums nothing.
func sumFiles(list func() []string) [sha256.Size]byte {
	h := sha256.New()
	if list == nil {
		var sum [sha256.Size]byte
		return sum
	}
	for _, f := range list() {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%d:%s:%d:", len(f), f, len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// configHash is the first 16 hex digits of the SHA-256 of a config file.
func configHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
