package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a circuit breaker in front of Redis. After threshold failures
// in a row it opens: decisions take the fallback path at once instead of
// waiting for a dead server. After the cooldown one decision is let through
// as a probe; its success closes the breaker, its failure opens it again for
// twice as long, up to maxCooldown. It is safe for concurrent use.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	closed atomic.Bool // the fast path: no lock while Redis is healthy

	fails atomic.Int64 // failures in a row

	mu      sync.Mutex
	open    bool
	until   time.Time     // while open: when the next probe may go
	backoff time.Duration // the current cooldown
	probing bool
}

const maxCooldown = 30 * time.Second

// allow reports whether a decision may go to Redis now.
func (b *breaker) allow() bool {
	if b.closed.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true
	}
	if b.probing || b.now().Before(b.until) {
		return false
	}
	b.probing = true
	return true
}

// success records a decision that Redis answered.
func (b *breaker) success() {
	if b.closed.Load() && b.fails.Load() == 0 {
		return
	}
	b.mu.Lock()
	b.fails.Store(0)
	b.open, b.probing, b.backoff = false, false, 0
	b.closed.Store(true)
	b.mu.Unlock()
}

// abandon records a decision whose caller gave up before Redis answered: it
// says nothing of Redis's health, but a probe must not stay outstanding.
func (b *breaker) abandon() {
	if b.closed.Load() {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// failure records a decision that Redis failed, and reports whether the
// breaker is now open.
func (b *breaker) failure() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	fails := b.fails.Add(1)
	if b.probing || (!b.open && fails >= int64(b.threshold)) {
		if b.probing {
			b.backoff = min(2*b.backoff, maxCooldown)
		} else {
			b.backoff = b.cooldown
		}
		b.open, b.probing = true, false
		b.closed.Store(false)
		b.until = b.now().Add(b.backoff)
	}
	return b.open
}

// state returns whether the breaker is open and, if so, until when.
func (b *breaker) state() (bool, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open, b.until
}
