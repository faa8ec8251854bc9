package redisstore

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Each decides groups in one call, as the coalescer sends the takes (groups
// of one) and TakeAll batches (larger groups) that queued together, and
// returns every request's decision.
func Each(s *Store, groups [][]sluice.Request) ([][]sluice.Decision, error) {
	batch := make([]*waiter, len(groups))
	for i, g := range groups {
		w := &waiter{start: time.Now()}
		for _, r := range g {
			c := s.compile(r.Policy)
			if c.err != nil {
				return nil, c.err
			}
			if c.script != plainScript {
				panic("Each: a policy that needs big-number arithmetic is never coalesced")
			}
			w.comp = append(w.comp, c)
			w.nl += len(c.suffixes)
		}
		w.reqs = g
		batch[i] = w
	}
	s.sendBatch(batch)
	out := make([][]sluice.Decision, len(groups))
	for i, w := range batch {
		if w.err != nil {
			return nil, w.err
		}
		out[i] = make([]sluice.Decision, len(groups[i]))
		decodeBatch(groups[i], w.res, out[i])
	}
	return out, nil
}

// SetBreakerClock makes s's circuit breaker read now instead of the wall
// clock, so that tests can let minutes of an outage pass at once.
func SetBreakerClock(s *Store, now func() time.Time) { s.breaker.now = now }

// Probing reports whether a probe of s's circuit breaker is in flight.
func Probing(s *Store) bool {
	s.breaker.mu.Lock()
	defer s.breaker.mu.Unlock()
	return s.breaker.probing
}

// ProbeDue makes the next probe of s's open circuit breaker due at once,
// as if its cooldown had passed: a test that waits for s to leave degraded
// operation calls it at each look, so as to wait for Redis alone, never for
// the cooldown's real time.
func ProbeDue(s *Store) {
	s.breaker.mu.Lock()
	defer s.breaker.mu.Unlock()
	if s.breaker.open {
		s.breaker.until = time.Time{}
	}
}

// PlainLua is the text of the script the store sends for policies in plain
// arithmetic, its pieces included.
var PlainLua = plainLua

// Scripts returns the text of every script the store sends, each named by
// its file and the script it wraps.
func Scripts() map[string]string {
	return map[string]string{
		"plain.lua":                              plainLua,
		"sluice.lua":                             wideLua,
		"penalty.lua(plain.lua)":                 penaltyPlainLua,
		"penalty.lua(sluice.lua)":                penaltyWideLua,
		"leasetake.lua(plain.lua)":               script("leasetake.lua", plainLua),
		"leasetake.lua(sluice.lua)":              script("leasetake.lua", wideLua),
		"leasetake.lua(penalty.lua(plain.lua))":  script("leasetake.lua", penaltyPlainLua),
		"leasetake.lua(penalty.lua(sluice.lua))": script("leasetake.lua", penaltyWideLua),
		"quota.lua":                              quotaLua,
		"lease.lua":                              leaseLua,
	}
}

// Wide reports whether the store decides p with the script for big-number
// arithmetic (sluice.lua, or its penalty form).
func Wide(s *Store, p *sluice.Policy) bool {
	c := s.compile(p).script
	return c == wideScript || c == penaltyWideScript
}

// Coalescing reports the coalescer's calls in flight and takes queued.
func Coalescing(s *Store) (busy, queued int) {
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return s.co.busy, len(s.co.queue)
}
