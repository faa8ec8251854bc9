package clock

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestFake(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := NewFake(start)
	if got := f.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	f.Advance(1500 * time.Millisecond)
	if got, want := f.UnixNano(), start.Add(1500*time.Millisecond).UnixNano(); got != want {
		t.Fatalf("after Advance: UnixNano() = %d, want %d", got, want)
	}
	f.Advance(-time.Second)
	if got, want := f.Now(), start.Add(500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("after stepping back: Now() = %v, want %v", got, want)
	}
	f.Set(start)
	if got := f.Now(); !got.Equal(start) {
		t.Fatalf("after Set: Now() = %v, want %v", got, start)
	}
}

// Within a synctest bubble time is fake and advances only when every
// goroutine is blocked, so the Coarse clock's lag can be checked exactly.
func TestCoarseTracksTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCoarse(time.Millisecond)
		start := c.UnixNano()
		if want := time.Now().UnixNano(); start != want {
			t.Fatalf("first reading = %d, want the current time %d", start, want)
		}
		for i := 1; i <= 50; i++ {
			time.Sleep(10 * time.Millisecond)
			got, now := c.UnixNano(), time.Now().UnixNano()
			if got > now {
				t.Fatalf("reading %d is ahead of real time %d", got, now)
			}
			if lag := time.Duration(now - got); lag > c.Resolution() {
				t.Fatalf("step %d: reading lags real time by %v, want at most %v", i, lag, c.Resolution())
			}
		}
		time.Sleep(2 * time.Second) // idle: the goroutine stops, and the bubble can end
	})
}

func TestCoarseStopsWhenIdleAndRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCoarse(time.Millisecond)
		c.UnixNano()
		if !c.running.Load() {
			t.Fatal("the ticking goroutine did not start on the first read")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if c.running.Load() {
			t.Fatal("the ticking goroutine still runs after 2s without reads")
		}
		// The first read after a pause is exact, not the stale reading.
		if got, want := c.UnixNano(), time.Now().UnixNano(); got != want {
			t.Fatalf("reading after restart = %d, want %d", got, want)
		}
		if !c.running.Load() {
			t.Fatal("the ticking goroutine did not restart")
		}
		time.Sleep(3 * time.Second) // let it stop so the bubble can end
	})
}

func TestCoarseNeverGoesBackwards(t *testing.T) {
	c := NewCoarse(100 * time.Microsecond)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := int64(0)
			for range 20000 {
				now := c.UnixNano()
				if now < last {
					t.Errorf("reading went backwards: %d after %d", now, last)
					return
				}
				last = now
			}
		})
	}
	wg.Wait()
}

func TestCoarseResolutionFloor(t *testing.T) {
	if got := NewCoarse(time.Nanosecond).Resolution(); got != 100*time.Microsecond {
		t.Fatalf("Resolution() = %v, want the 100µs floor", got)
	}
}
