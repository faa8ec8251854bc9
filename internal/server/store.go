// The store every generation shares.

package server

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/server/backend"
)

// openStore opens the store of the server's backend (package backend's
// table), which registers its metrics and runs its background work until
// Close.
func (g *Server) openStore() error {
	b, ok := backend.Lookup(g.backend)
	if !ok {
		return fmt.Errorf("server: unknown store backend %q (want %s)", g.backend, backend.Choices())
	}
	failures := g.m.storeErrors.WithLabelValues(g.backend)
	o, err := b.Open(backend.Env{
		Log:      g.log,
		Registry: g.reg,
		Clock:    g.opts.Clock,
		Failed:   failures.Inc,
		Degraded: g.health.degraded,
		Go:       g.goBackground,
	}, backend.Settings{MaxKeys: g.opts.MaxKeys, Redis: g.opts.Redis, Options: g.opts.BackendOptions})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	g.backendStore = o
	g.store, g.closer, g.ready = o.Store(), o.Close, o.Ready
	return nil
}
