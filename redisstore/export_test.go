package redisstore

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Each decides reqs in one call, as the coalescer sends takes that queued
// together (one alone as a plain take), and returns their decisions.
func Each(s *Store, reqs []sluice.Request) ([]sluice.Decision, error) {
	batch := make([]*waiter, len(reqs))
	for i, r := range reqs {
		c := s.compile(r.Policy)
		if c.err != nil {
			return nil, c.err
		}
		if c.script != plainScript {
			panic("Each: a policy that needs big-number arithmetic is never coalesced")
		}
		batch[i] = &waiter{c: c, p: r.Policy, key: r.Key, n: r.N, start: time.Now()}
	}
	s.each(batch)
	out := make([]sluice.Decision, len(reqs))
	for i, w := range batch {
		if w.err != nil {
			return nil, w.err
		}
		out[i] = decision(w.p, w.res)
	}
	return out, nil
}
