package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// penalized returns a limiter of a fixed_window policy of count per second
// with a fresh name and the penalty pen, or skips the test if the store
// reports that it does not support penalties.
func (e *env) penalized(count int64, pen sluice.Penalty) *sluice.Limiter {
	e.t.Helper()
	p, err := e.policy(limit(sluice.FixedWindow, count, s1)).WithPenalty(pen)
	if err != nil {
		e.t.Fatalf("WithPenalty(%+v): %v", pen, err)
	}
	lim := e.limiterOf(p)
	if _, err := lim.Peek(e.ctx(), "probe"); errors.Is(err, sluice.ErrPenaltyUnsupported) {
		e.t.Skipf("the store does not support penalties: %v", err)
	}
	return lim
}

// testPenalty checks escalating penalties (sluice.Penalty): an offence
// blocks the key for the next block duration, capped at the last; a blocked
// key is denied with RetryAfter up to the block's end and charged nothing;
// the offences are forgotten after the quiet period; Reset lifts the block;
// in a batch, a blocked key denies the batch and a denial is a strike.
func (s *suite) testPenalty(t *testing.T) {
	t.Run("Escalation", func(t *testing.T) {
		e := s.env(t)
		lim := e.penalized(2, sluice.Penalty{Blocks: []time.Duration{time.Minute, 10 * time.Minute}, Forget: time.Hour})
		p := lim.Policy()
		const m = time.Minute
		// offend takes the window's two requests at the current time
		// and a third, which is denied and blocks the key for block.
		offend := func(what string, block time.Duration) bool {
			t.Helper()
			return e.check(what+": first", p, e.take(lim, "k", 1), allow(1, s1)) &&
				e.check(what+": second", p, e.take(lim, "k", 1), allow(0, s1)) &&
				e.check(what+": offence", p, e.take(lim, "k", 1), deny(0, block, block))
		}
		e.at(0)
		if !offend("first offence", m) {
			return
		}
		e.at(30 * time.Second)
		if !e.check("blocked", p, e.take(lim, "k", 1), deny(0, 30*time.Second, 30*time.Second)) ||
			!e.check("blocked, cost 2", p, e.take(lim, "k", 2), deny(0, 30*time.Second, 30*time.Second)) ||
			!e.check("Peek while blocked", p, e.peek(lim, "k"), deny(0, 30*time.Second, 30*time.Second)) {
			return
		}
		e.at(m - time.Microsecond)
		if !e.check("blocked, last microsecond", p, e.take(lim, "k", 1), deny(0, time.Microsecond, time.Microsecond)) {
			return
		}
		if d := e.take(lim, "other", 1); !d.Allowed {
			t.Errorf("another key while k is blocked: %s, want allowed", describe(d))
		}
		// The block's requests were charged nothing: the window at the
		// block's end admits its two requests.
		e.at(m)
		if !offend("second offence", 10*m) {
			return
		}
		e.at(11 * m)
		if !offend("third offence (capped)", 10*m) {
			return
		}
		// The last block ended at 21m: an hour later the offences are
		// forgotten, and the next offence is a first one again.
		e.at(21*m + time.Hour)
		if !offend("after the quiet period", m) {
			return
		}
		e.reset(lim, "k")
		if !e.check("Peek after Reset", p, e.peek(lim, "k"), allow(2, 0)) {
			return
		}
		if !offend("after Reset", m) {
			return
		}
	})
	t.Run("QuietPeriodNotReached", func(t *testing.T) {
		e := s.env(t)
		lim := e.penalized(1, sluice.Penalty{Blocks: []time.Duration{time.Minute, time.Hour}, Forget: time.Hour})
		p := lim.Policy()
		e.at(0)
		e.take(lim, "k", 1)
		if !e.check("first offence", p, e.take(lim, "k", 1), deny(0, time.Minute, time.Minute)) {
			return
		}
		// 59 minutes after the block's end: the offence still counts.
		e.at(time.Hour)
		e.take(lim, "k", 1)
		if !e.check("second offence", p, e.take(lim, "k", 1), deny(0, time.Hour, time.Hour)) {
			return
		}
	})
	t.Run("After", func(t *testing.T) {
		e := s.env(t)
		lim := e.penalized(1, sluice.Penalty{After: 3, Blocks: []time.Duration{time.Minute}, Forget: 10 * time.Second})
		p := lim.Policy()
		e.at(0)
		e.take(lim, "k", 1)
		if !e.check("strike 1", p, e.take(lim, "k", 1), deny(0, s1, s1)) ||
			!e.check("strike 2", p, e.take(lim, "k", 1), deny(0, s1, s1)) {
			return
		}
		// Ten seconds without a strike forget the two.
		e.at(10 * time.Second)
		e.take(lim, "k", 1)
		if !e.check("strike 1 again", p, e.take(lim, "k", 1), deny(0, s1, s1)) ||
			!e.check("strike 2 again", p, e.take(lim, "k", 1), deny(0, s1, s1)) ||
			!e.check("strike 3: offence", p, e.take(lim, "k", 1), deny(0, time.Minute, time.Minute)) {
			return
		}
		e.at(10*time.Second + time.Minute)
		if !e.check("after the block", p, e.take(lim, "k", 1), allow(0, s1)) {
			return
		}
	})
	t.Run("TakeAll", func(t *testing.T) {
		e := s.env(t)
		lim := e.penalized(1, sluice.Penalty{Blocks: []time.Duration{time.Minute}, Forget: time.Hour})
		other := e.limiter(limit(sluice.FixedWindow, 5, s1))
		e.at(0)
		e.take(lim, "k", 1)
		e.take(lim, "k", 1) // blocks k
		e.at(10 * time.Second)
		out := make([]sluice.Decision, 2)
		reqs := []sluice.Request{{Policy: other.Policy(), Key: "k", N: 1}, {Policy: lim.Policy(), Key: "k", N: 1}}
		ok, err := sluice.TakeAll(e.ctx(), e.store, reqs, out)
		if err != nil {
			t.Fatalf("TakeAll: %v", err)
		}
		if ok || out[1].Allowed || !e.within(out[1].RetryAfter, 50*time.Second) {
			t.Errorf("TakeAll with a blocked key = %v, %s, want denied with RetryAfter 50s", ok, describe(out[1]))
		}
		if !e.check("the batch's other request was not charged", other.Policy(), e.peek(other, "k"), allow(5, 0)) {
			return
		}
		// A penalized request that a batch denies is a strike.
		e.take(lim, "j", 1)
		reqs = []sluice.Request{{Policy: other.Policy(), Key: "j", N: 1}, {Policy: lim.Policy(), Key: "j", N: 1}}
		ok, err = sluice.TakeAll(e.ctx(), e.store, reqs, out)
		if err != nil {
			t.Fatalf("TakeAll: %v", err)
		}
		if ok || out[1].Allowed || !e.within(out[1].RetryAfter, time.Minute) {
			t.Errorf("TakeAll denied by a penalized policy = %v, %s, want denied with RetryAfter 1m (an offence)", ok, describe(out[1]))
		}
		if !e.check("blocked by the batch's offence", lim.Policy(), e.peek(lim, "j"), deny(0, time.Minute, time.Minute)) {
			return
		}
		if !e.check("the other request of the denied batch was not charged", other.Policy(), e.peek(other, "j"), allow(5, 0)) {
			return
		}
	})
}
