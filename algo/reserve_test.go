package algo_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// Reserving requests one after another, all at the same real time, schedules
// them exactly one emission interval apart: the k-th after the burst is spent
// at ceil(k×Period/Count), with no rounding carried from one to the next.
//
// With a Burst of 1 the bucket cannot bank the fraction of a nanosecond by
// which each reservation, rounded up to a whole nanosecond, comes after its
// exact time: the k-th is at k×ceil(Period/Count), as for any token bucket of
// capacity one whose requests arrive at whole nanoseconds.
func TestReserveInARow(t *testing.T) {
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		for _, tt := range []struct {
			count  int64
			period time.Duration
			burst  int64
		}{
			{3, time.Second, 1},
			{3, time.Second, 2},
			{3, time.Second, 3},
			{7, 3 * time.Second, 2},
			{999_999_937, 24 * time.Hour, 5},
			{999_999_937, 24 * time.Hour, 1},
		} {
			r := mustCompile(t, alg, tt.count, tt.period, tt.burst)
			t.Run(r.String(), func(t *testing.T) {
				var st algo.State
				for i := range tt.burst {
					var s algo.Status
					if st, s = r.Eval(st, t0, 1); !s.Allowed {
						t.Fatalf("request %d of the burst denied: %+v", i, s)
					}
				}
				for k := int64(1); k <= 1000; k++ {
					want := ceilDiv(k*int64(tt.period), tt.count)
					if tt.burst == 1 {
						want = k * ceilDiv(int64(tt.period), tt.count)
					}
					wait := r.Wait(st, t0, 1)
					if wait != want {
						t.Fatalf("reservation %d: got Wait %d, want %d", k, wait, want)
					}
					if w := r.Wait(st, t0+wait-1, 1); w != 1 {
						t.Fatalf("reservation %d: a nanosecond before its time got Wait %d, want 1", k, w)
					}
					var s algo.Status
					st, s = r.Eval(st, t0+wait, 1)
					if !s.Allowed {
						t.Fatalf("reservation %d: Eval at now+Wait (%d) denied: %+v", k, wait, s)
					}
				}
			})
		}
	}
}

// Refund gives units back: a request at the same time then fits again, and
// the state is the one before the refunded request.
func TestRefund(t *testing.T) {
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		r := mustCompile(t, alg, 3, time.Second, 5)
		st, _ := r.Eval(algo.State{}, t0, 2)
		before := st
		st, s := r.Eval(st, t0+1000, 3)
		if !s.Allowed {
			t.Fatalf("%v: got %+v, want the burst admitted", &r, s)
		}
		if _, s := r.Eval(st, t0+1000, 1); s.Allowed {
			t.Fatalf("%v: got %+v, want a denial with the burst spent", &r, s)
		}
		st = r.Refund(st, t0+1000, 3)
		if got, want := r.Wait(st, t0+1000, 3), int64(0); got != want {
			t.Errorf("%v: after refunding 3: got Wait(3) %d, want %d", &r, got, want)
		}
		_, got := r.Eval(st, t0+1000, 0)
		_, want := r.Eval(before, t0+1000, 0)
		if got != want {
			t.Errorf("%v: after refunding 3: got %+v, want %+v as before the request", &r, got, want)
		}
		// Refunding more than was taken leaves a fresh key, not a fuller one.
		if got := r.Refund(st, t0+1000, 5); got != (algo.State{}) {
			t.Errorf("%v: refunding everything: got %+v, want the zero State", &r, got)
		}
		if got := r.Refund(algo.State{}, t0, 1); got != (algo.State{}) {
			t.Errorf("%v: refunding a fresh key: got %+v, want the zero State", &r, got)
		}
	}
}

// Cancelling a reservation while another is queued behind it leaves more
// debt, at the real time, than the bucket holds. (TokenBucket used to encode
// such a debt as a negative token count, which the next decision read as an
// unsigned number: the key was locked out with RetryAfter = MaxInt64 and
// Expiry overflowed. GCRA, which admits the same requests, was fine.)
func TestRefundPendingReservations(t *testing.T) {
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			r := mustCompile(t, alg, 1, time.Second, 1)
			st, _ := r.Eval(algo.State{}, t0, 1) // the burst
			for k := range int64(2) {            // two reservations, at t0+1s and t0+2s
				wait := r.Wait(st, t0, 1)
				if want := (k + 1) * 1e9; wait != want {
					t.Fatalf("reservation %d: got Wait %d, want %d", k, wait, want)
				}
				st, _ = r.Eval(st, t0+wait, 1)
			}
			st = r.Refund(st, t0, 1) // cancel one, at t0: one reservation is left, due at t0+1s
			if got := r.Expiry(st, t0); got != t0+2e9 {
				t.Errorf("after the refund: got Expiry t0%+d, want t0+2e9 (state %+v)", got-t0, st)
			}
			if got, want := r.Wait(st, t0, 1), int64(2e9); got != want {
				t.Errorf("after the refund: got Wait %d, want %d (state %+v)", got, want, st)
			}
			_, s := r.Eval(st, t0+2e9, 1)
			if want := (algo.Status{Allowed: true, Remaining: 0, ResetAfter: 1e9}); s != want {
				t.Errorf("after the refund, at t0+2s: got %+v, want %+v (state %+v)", s, want, st)
			}
		})
	}
}

// TestModelReservations drives the bucket algorithms with random requests,
// reservations (Wait, then Eval at now+wait) and cancellations (Refund at
// the real time) and compares every decision with the reference models.
func TestModelReservations(t *testing.T) {
	t.Parallel()
	rules := 150
	if testing.Short() {
		rules = 40
	}
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(*seed, 100+uint64(alg)))
			failures := 0
			for i := range rules {
				r, count, period, burst := randomRule(rng, alg)
				if !checkReservations(t, rng, &r, count, int64(period), burst) {
					t.Logf("rule %d of seed %d", i, *seed)
					if failures++; failures == 3 {
						t.Fatal("too many failures")
					}
				}
			}
		})
	}
}

func checkReservations(t *testing.T, rng *rand.Rand, r *algo.Rule, count, period, burst int64) bool {
	t.Helper()
	if burst == 0 {
		burst = count
	}
	var (
		st algo.State
		m  interface {
			model
			refund(now, n int64)
		}
		h       history
		pending []int64 // costs of reservations not yet due
	)
	if r.Algorithm() == algo.GCRA {
		m = newGCRAModel(count, period, burst)
	} else {
		m = newBucketModel(count, period, burst)
	}
	start := int64(1e18) + rng.Int64N(5e17)
	now := start
	for range 200 {
		n := max(randomCost(rng, r.Capacity()), 1)
		if now += randomGap(rng, r, now, n) / 4; now > 6e18 {
			break
		}
		switch op := rng.IntN(4); {
		case op == 0 && len(pending) > 0: // cancel a reservation
			i := rng.IntN(len(pending))
			n = pending[i]
			pending = append(pending[:i], pending[i+1:]...)
			h.add("refund t%+d n=%d", now-start, n)
			st = r.Refund(st, now, n)
			m.refund(now, n)
			_, got := r.Eval(st, now, 0)
			if want := m.decide(now, 0); got != want {
				t.Errorf("%v: after a refund at t%+d: got %+v, want %+v (state %+v)\nhistory: %v", r, now-start, got, want, st, h)
				return false
			}
		case op == 1: // reserve
			want := m.decide(now, n).RetryAfter
			wait := r.Wait(st, now, n)
			h.add("reserve t%+d n=%d wait=%d", now-start, n, wait)
			if wait != want {
				t.Errorf("%v: at t%+d: got Wait(%d) = %d, want %d (state %+v)\nhistory: %v", r, now-start, n, wait, want, st, h)
				return false
			}
			if wait > 3*period {
				continue
			}
			at := now + wait
			want2 := m.decide(at, n)
			var got algo.Status
			st, got = r.Eval(st, at, n)
			if got != want2 || !got.Allowed {
				t.Errorf("%v: reservation at t%+d+%d, n=%d: got %+v, want %+v, admitted\nhistory: %v", r, now-start, wait, n, got, want2, h)
				return false
			}
			m.commit(at, n)
			if wait > 0 {
				pending = append(pending, n)
			}
		default: // an ordinary request at the real time
			h.add("t%+d n=%d", now-start, n)
			want := m.decide(now, n)
			var got algo.Status
			st, got = r.Eval(st, now, n)
			if got != want {
				t.Errorf("%v: at t%+d, n=%d: got %+v, want %+v\nhistory: %v", r, now-start, n, got, want, h)
				return false
			}
			if got.Allowed {
				m.commit(now, n)
			}
		}
	}
	return true
}

// TokenBucket and GCRA admit exactly the same requests and answer with the
// same Status, Wait and Expiry, for identical rules and traffic, including
// reservations charged ahead of time and a clock that steps back.
func TestTokenBucketMatchesGCRA(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(*seed, 21))
	for range 300 {
		_, count, period, burst := randomRule(rng, algo.GCRA)
		tb := mustCompile(t, algo.TokenBucket, count, period, burst)
		g := mustCompile(t, algo.GCRA, count, period, burst)
		var stTB, stG algo.State
		var h history
		start := int64(1e18) + rng.Int64N(5e17)
		now := start
		for range 300 {
			n := randomCost(rng, g.Capacity())
			gap := randomGap(rng, &g, now, n)
			if rng.IntN(20) == 0 {
				gap = -min(rng.Int64N(int64(period))+1, now-start)
			}
			if now += gap; now > 6e18 {
				break
			}
			at := now
			if n > 0 && rng.IntN(4) == 0 { // a reservation
				w1, w2 := tb.Wait(stTB, now, n), g.Wait(stG, now, n)
				if w1 != w2 {
					t.Fatalf("seed %d, %v: at t%+d: Wait(%d) got %d for token_bucket, %d for gcra\nhistory: %v", *seed, &g, now-start, n, w1, w2, h)
				}
				if w1 <= 3*int64(period) {
					at += w1
				}
			}
			h.add("t%+d n=%d", at-start, n)
			nextTB, s1 := tb.Eval(stTB, at, n)
			nextG, s2 := g.Eval(stG, at, n)
			if s1 != s2 {
				t.Fatalf("seed %d, %v: at t%+d, n=%d: got %+v for token_bucket, %+v for gcra\nhistory: %v", *seed, &g, at-start, n, s1, s2, h)
			}
			stTB, stG = nextTB, nextG
			if e1, e2 := tb.Expiry(stTB, now), g.Expiry(stG, now); e1 != e2 {
				t.Fatalf("seed %d, %v: at t%+d: Expiry got t%+d for token_bucket, t%+d for gcra\nhistory: %v", *seed, &g, now-start, e1-start, e2-start, h)
			}
		}
	}
}
