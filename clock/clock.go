// Package clock provides the clocks Sluice's stores read: Coarse, a cheap
// monotonic clock for production, and Fake, a clock that tests move by hand.
//
// Both have a Now method returning time.Time, so either satisfies the Clock
// interfaces that stores define, and an UnixNano method that stores prefer
// on their decision path.
package clock

import (
	"sync/atomic"
	"time"
)

// Coarse is a monotonic clock that reads the system clock once per
// resolution on a background goroutine and answers from memory in between.
// A read costs an atomic load (well under a nanosecond) instead of the tens
// of nanoseconds of time.Now on virtual machines whose clock source is slow.
//
// Its readings lag real time by at most about one resolution, plus whatever
// delays the goroutine's wake-ups on an overloaded machine. For a rate
// limiter a lagging clock is safe: less time seems to have passed, so fewer
// requests are admitted, never more. The readings never go backwards, even
// when the system's wall clock is stepped back.
//
// The goroutine starts on the first read and stops by itself after a second
// without reads; the next read starts it again. A Coarse is safe for
// concurrent use and needs no Close.
type Coarse struct {
	resolution time.Duration
	base       time.Time // carries the monotonic reading readings count from
	baseNs     int64     // base as nanoseconds since the Unix epoch

	ns      atomic.Int64 // the current reading
	running atomic.Bool  // the goroutine is ticking
	used    atomic.Bool  // read since the last tick
}

// idleTicks is how many ticks without reads stop the goroutine: one second.
func (c *Coarse) idleTicks() int { return max(int(time.Second/c.resolution), 1) }

var coarse = NewCoarse(time.Millisecond)

// Default returns the process-wide Coarse clock with a resolution of one
// millisecond.
func Default() *Coarse { return coarse }

// NewCoarse returns a Coarse clock. Resolutions below 100µs are raised to
// 100µs.
func NewCoarse(resolution time.Duration) *Coarse {
	base := time.Now()
	return &Coarse{resolution: max(resolution, 100*time.Microsecond), base: base, baseNs: base.UnixNano()}
}

// Resolution returns the clock's update interval.
func (c *Coarse) Resolution() time.Duration { return c.resolution }

// Now returns the clock's reading.
func (c *Coarse) Now() time.Time { return time.Unix(0, c.UnixNano()) }

// UnixNano returns the clock's reading in nanoseconds since the Unix epoch.
func (c *Coarse) UnixNano() int64 {
	if !c.running.Load() {
		return c.wake()
	}
	if !c.used.Load() {
		c.used.Store(true)
	}
	return c.ns.Load()
}

func (c *Coarse) read() int64 { return c.baseNs + int64(time.Since(c.base)) }

// advance moves the reading forward to t, never backwards.
func (c *Coarse) advance(t int64) {
	for {
		old := c.ns.Load()
		if t <= old || c.ns.CompareAndSwap(old, t) {
			return
		}
	}
}

func (c *Coarse) wake() int64 {
	c.advance(c.read())
	c.used.Store(true)
	if c.running.CompareAndSwap(false, true) {
		go c.run()
	}
	return c.ns.Load()
}

func (c *Coarse) run() {
	t := time.NewTicker(c.resolution)
	defer t.Stop()
	idle, limit := 0, c.idleTicks()
	for range t.C {
		c.advance(c.read())
		if c.used.Swap(false) {
			idle = 0
			continue
		}
		if idle++; idle >= limit {
			c.running.Store(false)
			return
		}
	}
}

// Fake is a clock that moves only when told to. Tests use it to decide at
// exact times. It is safe for concurrent use.
type Fake struct{ ns atomic.Int64 }

// NewFake returns a Fake clock reading t.
func NewFake(t time.Time) *Fake {
	f := new(Fake)
	f.ns.Store(t.UnixNano())
	return f
}

// Now returns the clock's reading.
func (f *Fake) Now() time.Time { return time.Unix(0, f.ns.Load()) }

// UnixNano returns the clock's reading in nanoseconds since the Unix epoch.
func (f *Fake) UnixNano() int64 { return f.ns.Load() }

// Advance moves the clock by d, which may be negative to simulate a clock
// stepped back.
func (f *Fake) Advance(d time.Duration) { f.ns.Add(int64(d)) }

// Set sets the clock's reading.
func (f *Fake) Set(t time.Time) { f.ns.Store(t.UnixNano()) }
