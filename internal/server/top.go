// The heavy hitters of every rule, the store's and the configuration's
// health, for the admin API's top, overview and dashboard.

package server

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/rls"
	"github.com/sluicehq/sluice/internal/server/backend"
	"github.com/sluicehq/sluice/internal/topk"
)

// topOutcome returns the heavy hitters' class of a gateway rule's outcome;
// false for the outcomes that decided nothing (exempt, skipped, canceled,
// allow-listed, not counted).
func topOutcome(o httplimit.Outcome) (topk.Outcome, bool) {
	switch o {
	case httplimit.OutcomeAllowed, httplimit.OutcomeDelayed:
		return topk.Allowed, true
	case httplimit.OutcomeLimited:
		return topk.Limited, true
	case httplimit.OutcomeShadowLimited, httplimit.OutcomeSoftLimited:
		return topk.ShadowLimited, true
	case httplimit.OutcomeError:
		return topk.Error, true
	}
	return 0, false
}

// serviceTopOutcome is topOutcome for the rate-limit service.
func serviceTopOutcome(o rls.Outcome) (topk.Outcome, bool) {
	switch o {
	case rls.OutcomeAllowed:
		return topk.Allowed, true
	case rls.OutcomeLimited:
		return topk.Limited, true
	case rls.OutcomeShadowLimited:
		return topk.ShadowLimited, true
	case rls.OutcomeError:
		return topk.Error, true
	}
	return 0, false
}

// serviceObserver is the rate-limit service's Observer: its metrics, its
// descriptors' heavy hitters and the access log.
type serviceObserver struct {
	m      *rls.Metrics
	top    *topk.Set
	access *accessLog // nil when off
}

var _ rls.Observer = (*serviceObserver)(nil)

// Observe implements rls.Observer.
func (o *serviceObserver) Observe(ctx context.Context, e *rls.Event) {
	o.m.Observe(ctx, e)
	for i := range e.Descriptors {
		d := &e.Descriptors[i]
		if d.Key == "" {
			continue
		}
		if c, ok := serviceTopOutcome(d.Outcome); ok {
			o.top.Sketch(d.Name).Record(d.Key, c)
		}
	}
	if o.access != nil {
		o.access.service(ctx, e)
	}
}

// tickTop moves the heavy hitters' clock every second, until ctx ends.
func (g *Server) tickTop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.top.Tick(now)
			g.dtop.Tick(now)
		}
	}
}

// health records the store's outages and the reloads, for the overview.
type healthRecord struct {
	mu                     sync.Mutex
	degradedSince, recover time.Time
	applied                time.Time
	config                 string
	reloads, failures      uint64
	lastFailure            string
}

func (h *healthRecord) degraded(now time.Time, degraded bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if degraded {
		h.degradedSince = now
	} else {
		h.recover = now
	}
}

func (h *healthRecord) reloaded(hash string, now time.Time, err error, reload bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil:
		h.failures++
		h.lastFailure = err.Error()
		return
	case reload:
		h.reloads++
	}
	h.applied, h.config = now, hash
}

// adminHealth returns the health the overview shows.
func (g *Server) adminHealth() admin.Health {
	h := &g.health
	h.mu.Lock()
	defer h.mu.Unlock()
	out := admin.Health{Backend: g.backend, DegradedSince: h.degradedSince, RecoveredAt: h.recover,
		Config: h.config, Applied: h.applied, Reloads: h.reloads, ReloadFailures: h.failures, LastFailure: h.lastFailure}
	if d, ok := g.backendStore.(backend.Degradable); ok {
		out.Degraded = d.Degraded()
	}
	return out
}

// showKey returns how the admin API shows a key: as its digest when the
// store hashes keys (store.redis.hash_keys), unless admin.show_keys says
// otherwise; else a gateway rule's as its values (httplimit.KeyText), a
// descriptor's as it is.
func (g *Server) showKey() func(key string, rule bool) string {
	kh, ok := g.backendStore.(backend.KeyHasher)
	digest := ok && kh.HashesKeys() && !g.opts.AdminShowKeys
	return func(key string, rule bool) string {
		switch {
		case digest:
			return kh.KeyDigest(key)
		case rule:
			return httplimit.KeyText(key)
		}
		return key
	}
}
