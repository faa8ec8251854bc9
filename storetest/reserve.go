package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// after sets the Delay wanted.
func (o outcome) after(delay time.Duration) outcome {
	o.delay = delay
	return o
}

// testReserve checks Reserve and Cancel, the leaky bucket as a queue, on
// bucket policies of 10 per second: one unit every 100ms, a whole number of
// microseconds, so that no decision depends on rounding.
func (s *suite) testReserve(t *testing.T) {
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			t.Run("schedule", func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 1))
				for k := range 5 {
					delay := time.Duration(k) * 100 * ms
					r := e.reserve(lim, "k", 1, s1)
					if !e.check(fmt.Sprintf("Reserve #%d", k), lim.Policy(), r.Decision, allow(0, delay+100*ms).after(delay)) {
						return
					}
				}
				// The reserved slots are taken: a request at 100ms
				// waits for the end of the queue.
				e.at(100 * ms)
				e.check("AllowN(1) while reservations are queued", lim.Policy(), e.take(lim, "k", 1), deny(0, 400*ms, 400*ms))
			})
			t.Run("burst", func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 3))
				for k := range 6 {
					delay := time.Duration(max(k-2, 0)) * 100 * ms
					rem := int64(max(2-k, 0))
					r := e.reserve(lim, "k", 1, s1)
					if !e.check(fmt.Sprintf("Reserve #%d", k), lim.Policy(), r.Decision, allow(rem, delay+time.Duration(3-rem)*100*ms).after(delay)) {
						return
					}
				}
				// A cost of 2 waits for 2 units.
				r := e.reserve(lim, "k", 2, s1)
				e.check("Reserve of cost 2", lim.Policy(), r.Decision, allow(0, 800*ms).after(500*ms))
			})
			t.Run("max_wait", func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 1))
				e.take(lim, "k", 1)
				for _, c := range []struct {
					maxWait time.Duration
					want    outcome
				}{
					{50 * ms, deny(0, 100*ms, 100*ms)},           // too far: nothing charged
					{0, deny(0, 100*ms, 100*ms)},                 // nor here
					{100 * ms, allow(0, 200*ms).after(100 * ms)}, // exactly maxWait away
					{150 * ms, deny(0, 200*ms, 200*ms)},
					{s1, allow(0, 300*ms).after(200 * ms)},
				} {
					r := e.reserve(lim, "k", 1, c.maxWait)
					if !e.check(fmt.Sprintf("Reserve with maxWait %v", c.maxWait), lim.Policy(), r.Decision, c.want) {
						return
					}
				}
			})
			t.Run("cancel_before_due", func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 1))
				e.take(lim, "k", 1)
				r := e.reserve(lim, "k", 1, s1)
				e.at(50 * ms)
				if err := r.Cancel(e.ctx()); err != nil {
					t.Fatalf("Cancel: %v", err)
				}
				if err := r.Cancel(e.ctx()); err != nil { // a second Cancel does nothing
					t.Fatalf("second Cancel: %v", err)
				}
				// The 100ms slot is free again.
				r = e.reserve(lim, "k", 1, s1)
				e.check("Reserve after Cancel", lim.Policy(), r.Decision, allow(0, 150*ms).after(50*ms))
			})
			t.Run("cancel_last_of_queue", func(t *testing.T) {
				// Three reservations queued beyond the burst; the
				// last one is cancelled before its time.
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 1))
				e.take(lim, "k", 1)
				var last sluice.Reservation
				for range 3 {
					last = e.reserve(lim, "k", 1, s1)
				}
				if !e.check("third Reserve", lim.Policy(), last.Decision, allow(0, 400*ms).after(300*ms)) {
					return
				}
				if err := last.Cancel(e.ctx()); err != nil {
					t.Fatalf("Cancel: %v", err)
				}
				r := e.reserve(lim, "k", 1, s1)
				if !e.check("Reserve after cancelling the last reservation", lim.Policy(), r.Decision, allow(0, 400*ms).after(300*ms)) {
					return
				}
				e.at(time.Second)
				e.check("AllowN(1) once the queue has drained", lim.Policy(), e.take(lim, "k", 1), allow(0, 100*ms))
			})
			t.Run("cancel_after_due", func(t *testing.T) {
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 1))
				e.take(lim, "k", 1)
				r := e.reserve(lim, "k", 1, s1)
				e.at(100 * ms) // the reservation's time has come
				if err := r.Cancel(e.ctx()); err != nil {
					t.Fatalf("Cancel: %v", err)
				}
				e.check("AllowN(1) after a late Cancel", lim.Policy(), e.take(lim, "k", 1), deny(0, 100*ms, 100*ms))
				// Nor does a Cancel of a reservation without delay.
				e.at(time.Minute)
				r = e.reserve(lim, "k", 1, s1)
				if err := r.Cancel(e.ctx()); err != nil {
					t.Fatalf("Cancel: %v", err)
				}
				e.check("AllowN(1) after cancelling an immediate reservation", lim.Policy(), e.take(lim, "k", 1), deny(0, 100*ms, 100*ms))
			})
			t.Run("two_limits", func(t *testing.T) {
				// 10 per second with a burst of 10, and 20 per
				// minute: one unit every 3s.
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 10), limit(alg, 20, time.Minute))
				for k := range 21 {
					var want outcome
					switch {
					case k < 10:
						want = allow(int64(9-k), time.Duration(k+1)*100*ms).by(0, 10)
					case k < 19:
						d := time.Duration(k-9) * 100 * ms
						want = allow(0, d+s1).by(0, 10).after(d)
					case k == 19:
						// Both limits have 0 left: the longer
						// reset binds, 20 units less 1s drained.
						want = allow(0, 60*s1).by(1, 20).after(s1)
					default:
						want = allow(0, 63*s1).by(1, 20).after(3 * s1)
					}
					r := e.reserve(lim, "k", 1, 10*s1)
					if !e.check(fmt.Sprintf("Reserve #%d of 21", k), lim.Policy(), r.Decision, want) {
						return
					}
				}
				// The next would wait 2.2s for the first limit and
				// 6s for the second.
				r := e.reserve(lim, "k", 1, s1)
				e.check("Reserve beyond maxWait", lim.Policy(), r.Decision, deny(0, 6*s1, 63*s1).by(1, 20))
			})
			t.Run("concurrent", func(t *testing.T) {
				// 40 reservations at once on 10 per second with a
				// burst of 5: 5 at once, then one every 100ms.
				e := s.env(t)
				lim := e.limiter(bucket(alg, 10, s1, 5))
				delays := make([]time.Duration, 40)
				var wg sync.WaitGroup
				for i := range delays {
					wg.Go(func() {
						r, err := lim.Reserve(e.ctx(), "k", 1, 10*s1)
						if err != nil || !r.Allowed {
							t.Errorf("Reserve = %s, %v; want allowed", describe(r.Decision), err)
						}
						delays[i] = r.Delay
					})
				}
				wg.Wait()
				slices.Sort(delays)
				for i, d := range delays {
					want := time.Duration(max(i-4, 0)) * 100 * ms
					if !s.within(d, want) {
						t.Errorf("delays sorted: [%d] = %v, want %v (all: %v)", i, d, want, delays)
						break
					}
				}
			})
		})
	}
	t.Run("windows_unsupported", func(t *testing.T) {
		e := s.env(t)
		for _, ls := range [][]sluice.Limit{
			{limit(sluice.FixedWindow, 10, s1)},
			{limit(sluice.SlidingWindow, 10, s1)},
			{limit(sluice.SlidingLog, 10, s1)},
			{limit(sluice.GCRA, 10, s1), limit(sluice.FixedWindow, 100, time.Minute)},
		} {
			lim := e.limiter(ls...)
			if _, err := lim.Reserve(e.ctx(), "k", 1, s1); !errors.Is(err, sluice.ErrReserveUnsupported) {
				t.Errorf("Reserve on %v: error %v, want ErrReserveUnsupported", ls, err)
			}
			if _, err := lim.Wait(e.ctx(), "k", 1, s1); !errors.Is(err, sluice.ErrReserveUnsupported) {
				t.Errorf("Wait on %v: error %v, want ErrReserveUnsupported", ls, err)
			}
			if d := e.peek(lim, "k"); !d.Allowed || d.Remaining != 10 {
				t.Errorf("Peek on %v after the failed calls = %s, want allowed with 10 remaining", ls, describe(d))
			}
		}
	})
}

// testWait checks the paths of Limiter.Wait that need no sleep: the suite
// never sleeps in real time (package memstore tests the sleeping paths in
// fake time with testing/synctest).
func (s *suite) testWait(t *testing.T) {
	for _, alg := range buckets {
		t.Run(alg.String(), func(t *testing.T) {
			e := s.env(t)
			lim := e.limiter(bucket(alg, 10, s1, 1))
			d, err := lim.Wait(e.ctx(), "k", 1, s1)
			if err != nil || !e.check("Wait with room", lim.Policy(), d, allow(0, 100*ms)) {
				t.Fatalf("Wait with room: error %v", err)
			}
			// The turn is 100ms away: beyond maxWait, or the context's
			// deadline, Wait returns a denial at once and charges
			// nothing.
			d, err = lim.Wait(e.ctx(), "k", 1, 50*ms)
			if err != nil || !e.check("Wait beyond maxWait", lim.Policy(), d, deny(0, 100*ms, 100*ms)) {
				t.Fatalf("Wait beyond maxWait: error %v", err)
			}
			ctx, cancel := context.WithTimeout(e.ctx(), 50*ms)
			d, err = lim.Wait(ctx, "k", 1, time.Hour)
			cancel()
			if err != nil || !e.check("Wait beyond the context's deadline", lim.Policy(), d, deny(0, 100*ms, 100*ms)) {
				t.Fatalf("Wait beyond the context's deadline: error %v", err)
			}
			ctx, cancel = context.WithCancel(e.ctx())
			cancel()
			if _, err := lim.Wait(ctx, "k", 1, time.Hour); !errors.Is(err, context.Canceled) {
				t.Errorf("Wait with a cancelled context: error %v, want context.Canceled", err)
			}
			r := e.reserve(lim, "k", 1, s1)
			e.check("Reserve after the Waits that did not wait", lim.Policy(), r.Decision, allow(0, 200*ms).after(100*ms))
		})
	}
}
