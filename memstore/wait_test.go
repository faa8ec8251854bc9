package memstore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// The Wait tests run in a synctest bubble with a store whose clock reads
// time.Now, so that Limiter.Wait's timer and the store share fake time:
// the waits are real sleeps, and exact.

// waitLimiter returns a limiter of 10 per second with a burst of 1 (one
// unit every 100ms) on a fresh store in the current bubble.
func waitLimiter(t *testing.T, alg sluice.Algorithm) *sluice.Limiter {
	t.Helper()
	s := memstore.New(memstore.Options{Clock: bubbleClock{}, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return newLimiter(t, s, sluice.Limit{Algorithm: alg, Count: 10, Period: time.Second, Burst: 1})
}

var buckets = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA}

func TestWaitSleepsTheDelay(t *testing.T) {
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := waitLimiter(t, alg)
				ctx := context.Background()
				for i, want := range []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond} {
					start := time.Now()
					d, err := l.Wait(ctx, "k", 1, time.Second)
					if err != nil || !d.Allowed {
						t.Fatalf("Wait #%d = %+v, %v; want allowed", i, d, err)
					}
					if slept := time.Since(start); slept != want || d.Delay != want {
						t.Errorf("Wait #%d: slept %v with Delay %v, want %v and %v", i, slept, d.Delay, want, want)
					}
				}
			})
		})
	}
}

// Waiters that arrive together are released one interval apart.
func TestWaitQueuesWaiters(t *testing.T) {
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := waitLimiter(t, alg)
				start := time.Now()
				var mu sync.Mutex
				var released []time.Duration
				var wg sync.WaitGroup
				for range 5 {
					wg.Go(func() {
						d, err := l.Wait(context.Background(), "k", 1, time.Second)
						if err != nil || !d.Allowed {
							t.Errorf("Wait = %+v, %v; want allowed", d, err)
						}
						mu.Lock()
						released = append(released, time.Since(start))
						mu.Unlock()
					})
				}
				wg.Wait()
				slices.Sort(released)
				want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}
				if !slices.Equal(released, want) {
					t.Errorf("waiters released after %v, want %v", released, want)
				}
			})
		})
	}
}

// A context cancelled while waiting returns its error at once and gives
// the slot back: the next reservation takes it.
func TestWaitCancelledGivesSlotBack(t *testing.T) {
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := waitLimiter(t, alg)
				allowBubble(t, l)
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(30*time.Millisecond, cancel)
				start := time.Now()
				d, err := l.Wait(ctx, "k", 1, time.Second)
				if !errors.Is(err, context.Canceled) || d.Allowed {
					t.Fatalf("Wait with a context cancelled after 30ms = %+v, %v; want context.Canceled", d, err)
				}
				if slept := time.Since(start); slept != 30*time.Millisecond {
					t.Errorf("Wait returned after %v, want 30ms, when the context was cancelled", slept)
				}
				// The slot at 100ms is free again: 70ms from now, not
				// 170ms.
				r, err := l.Reserve(context.Background(), "k", 1, time.Second)
				if err != nil || !r.Allowed || r.Delay != 70*time.Millisecond {
					t.Errorf("Reserve after the cancelled Wait = Delay %v, allowed %v, %v; want allowed after 70ms", r.Delay, r.Allowed, err)
				}
			})
		})
	}
}

// A context whose deadline comes before the turn makes Wait return a denial
// at once, charging nothing; one whose deadline leaves time enough waits.
func TestWaitDeadline(t *testing.T) {
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := waitLimiter(t, alg)
				allowBubble(t, l)
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				start := time.Now()
				d, err := l.Wait(ctx, "k", 1, time.Second)
				if err != nil || d.Allowed || d.RetryAfter != 100*time.Millisecond {
					t.Fatalf("Wait with 50ms to its deadline = %+v, %v; want denied with RetryAfter 100ms", d, err)
				}
				if slept := time.Since(start); slept != 0 {
					t.Errorf("Wait returned its denial after %v, want at once", slept)
				}
				r, err := l.Reserve(context.Background(), "k", 1, time.Second)
				if err != nil || !r.Allowed || r.Delay != 100*time.Millisecond {
					t.Errorf("Reserve after the denied Wait = Delay %v, allowed %v, %v; want allowed after 100ms: nothing was charged", r.Delay, r.Allowed, err)
				}
				ctx, cancel = context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				d, err = l.Wait(ctx, "k", 1, time.Second)
				if err != nil || !d.Allowed || time.Since(start) != 200*time.Millisecond {
					t.Errorf("Wait with a second to its deadline = %+v, %v after %v; want allowed after 200ms", d, err, time.Since(start))
				}
			})
		})
	}
}

func allowBubble(t *testing.T, l *sluice.Limiter) {
	t.Helper()
	if d, err := l.Allow(context.Background(), "k"); err != nil || !d.Allowed {
		t.Fatalf("Allow = %+v, %v; want allowed", d, err)
	}
}

// A waiter that gives up while others queue behind it gives its slot back,
// and the queue behind it is unharmed. For token_bucket this needs a debt
// above the bucket's capacity to be encoded (algo.Rule.state anchors it in
// the future); encoding it as negative tokens once denied the key for 292
// years.
func TestWaitCancelledInQueue(t *testing.T) {
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := waitLimiter(t, alg)
				allowBubble(t, l)
				// A patient waiter takes the 100ms slot, then an
				// impatient one the 200ms slot; it gives up at 30ms.
				// (Every check before wg.Wait reports with Errorf: a
				// Fatalf would leave the patient waiter behind.)
				var wg sync.WaitGroup
				wg.Go(func() {
					if d, err := l.Wait(context.Background(), "k", 1, time.Second); err != nil || !d.Allowed {
						t.Errorf("patient Wait = %+v, %v; want allowed", d, err)
					}
				})
				synctest.Wait()
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(30*time.Millisecond, cancel)
				if _, err := l.Wait(ctx, "k", 1, time.Second); !errors.Is(err, context.Canceled) {
					t.Errorf("impatient Wait: error %v, want context.Canceled", err)
				}
				r, err := l.Reserve(context.Background(), "k", 1, time.Second)
				if err != nil || !r.Allowed || r.Delay != 170*time.Millisecond {
					t.Errorf("Reserve at 30ms after the impatient waiter left = %+v, %v; want allowed after 170ms (the 200ms slot)", r.Decision, err)
				}
				wg.Wait()
			})
		})
	}
}
