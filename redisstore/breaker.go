package redisstore

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a circuit breaker in front of Redis. After threshold failures
// in a row it opens: decisions take the fallback path at once instead of
// waiting for a dead server. While it is open, Redis is probed with a PING
// about every interval (jittered by ±25%, so that many processes do not
// probe in step), however long the outage has lasted; the first probe that
// succeeds closes it. Probes are not decisions: no caller waits for one,
// and a Redis that is still down costs a probe one Timeout in the
// background. It is safe for concurrent use.
type breaker struct {
	threshold int
	interval  time.Duration
	now       func() time.Time
	jitter    func() float64 // in [0, 1)

	closed atomic.Bool // the fast path: no lock while Redis is healthy

	fails atomic.Int64 // failures in a row

	mu      sync.Mutex
	open    bool
	until   time.Time // while open: when the next probe is due
	probing bool      // a probe is in flight
	err     error     // while open: the failure that opened it
}

func newBreaker(threshold int, interval time.Duration) *breaker {
	b := &breaker{threshold: threshold, interval: interval, now: time.Now, jitter: rand.Float64}
	b.closed.Store(true)
	return b
}

// next returns the time of the next probe after t: interval later, ±25%.
func (b *breaker) next(t time.Time) time.Time {
	return t.Add(time.Duration((0.75 + 0.5*b.jitter()) * float64(b.interval)))
}

// allow reports whether a decision may go to Redis now.
func (b *breaker) allow() bool {
	if b.closed.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.open
}

// due reports whether a probe should start now; if so, the caller must run
// it and report its outcome with probed.
func (b *breaker) due() bool {
	if b.closed.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open || b.probing || b.now().Before(b.until) {
		return false
	}
	b.probing = true
	return true
}

// probed records the outcome of a probe, and reports whether it closed the
// breaker.
func (b *breaker) probed(err error) bool {
	if err == nil {
		return b.success()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if b.open {
		b.until = b.next(b.now())
	}
	return false
}

// success records a decision that Redis answered, and reports whether it
// closed the breaker.
func (b *breaker) success() bool {
	if b.closed.Load() && b.fails.Load() == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails.Store(0)
	was := b.open
	b.open, b.probing, b.err = false, false, nil
	b.closed.Store(true)
	return was
}

// failure records a decision that Redis failed with err, and reports
// whether it opened the breaker.
func (b *breaker) failure(err error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	fails := b.fails.Add(1)
	if b.open || fails < int64(b.threshold) {
		return false
	}
	b.open, b.err = true, err
	b.closed.Store(false)
	b.until = b.next(b.now())
	return true
}

// state returns whether the breaker is open and, if so, until when (the
// next probe's time) and the failure that opened it.
func (b *breaker) state() (open bool, until time.Time, err error) {
	if b.closed.Load() {
		return false, time.Time{}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open, b.until, b.err
}

// admit reports whether a decision may go to Redis now, and starts a probe
// if the breaker is open and one is due.
func (s *Store) admit() bool {
	if s.breaker.allow() {
		return true
	}
	s.probe()
	return false
}

// probe starts a probe (a PING in the background, bounded by Timeout) if
// the breaker is open and one is due.
func (s *Store) probe() {
	if !s.breaker.due() {
		return
	}
	c := s.client()
	s.bg.Lock()
	defer s.bg.Unlock()
	if s.bg.closed || c == nil {
		s.breaker.probed(ErrNotConnected)
		return
	}
	s.bg.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.deadlines.timeout)
		defer cancel()
		// A connection that went stale in the outage fails its next
		// command once, at once; the client then dials again. So a probe
		// tries a few times within its Timeout before it reports failure.
		var err error
		for range probeAttempts {
			if err = c.Do(ctx, c.B().Ping().Build()).Error(); err == nil || ctx.Err() != nil {
				break
			}
		}
		if s.breaker.probed(err) {
			s.changed()
		}
		if err == nil && s.tab.pending.Load() != 0 {
			s.settleSoon()
		}
	})
}

// probeAttempts is how many PINGs a probe sends at most: one per
// connection that may have gone stale (Options.Connections is 2 by
// default), and one more.
const probeAttempts = 3

// changed calls Options.OnStateChange if the store's degraded state differs
// from the one it last reported. The calls alternate, true then false, and
// end on the current state: a flap too brief to observe is not reported.
func (s *Store) changed() {
	if s.onState == nil {
		return
	}
	s.state.Lock()
	defer s.state.Unlock()
	degraded, err := s.degradedState()
	if degraded == s.state.reported {
		return
	}
	s.state.reported = degraded
	s.onState(degraded, err)
}

// degradedState reports whether decisions take the OnError path without
// calling Redis, and why.
func (s *Store) degradedState() (bool, error) {
	if s.client() == nil {
		return true, s.connector.err()
	}
	if open, _, err := s.breaker.state(); open {
		return true, err
	}
	return false, nil
}
