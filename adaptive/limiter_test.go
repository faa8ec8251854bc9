package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fixed returns options whose limit never moves from n.
func fixed(n int, o Options) Options {
	o.MinLimit, o.MaxLimit, o.InitialLimit = n, n, n
	return o
}

func mustNew(t *testing.T, o Options) *Limiter {
	t.Helper()
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hold admits a request of class c and fails the test unless it was.
func hold(t *testing.T, l *Limiter, c Class) *Slot {
	t.Helper()
	s, a, err := l.Acquire(context.Background(), c)
	if err != nil || !a.Admitted {
		t.Fatalf("a %s request: %+v, %v; want it admitted", c, a, err)
	}
	return s
}

// Each class fills only its share of the limit: with 20 slots, Sheddable
// requests are admitted up to 15 in flight (75%), Default ones up to 18
// (90%), Critical ones up to 20.
func TestSharesOfTheLimit(t *testing.T) {
	for _, tc := range []struct {
		class Class
		o     Options
		want  int
	}{
		{Sheddable, Options{}, 15},
		{Default, Options{}, 18},
		{Critical, Options{}, 20},
		{Sheddable, Options{Shares: Shares{Default: 0.5, Sheddable: 0.2}}, 4},
		{Default, Options{Shares: Shares{Default: 0.5, Sheddable: 0.2}}, 10},
		{Default, Options{Shares: Shares{Default: 1}}, 20},
	} {
		t.Run(fmt.Sprintf("%s %+v", tc.class, tc.o.Shares), func(t *testing.T) {
			l := mustNew(t, fixed(20, tc.o))
			n := 0
			for {
				_, a, err := l.Acquire(context.Background(), tc.class)
				if err != nil {
					t.Fatal(err)
				}
				if !a.Admitted {
					if a.Reason != NoSlot || a.RetryAfter != time.Second || a.InFlight != n || a.Limit != 20 {
						t.Errorf("refusal %+v, want reason limit, retry after 1s, %d in flight under 20", a, n)
					}
					break
				}
				n++
			}
			if n != tc.want {
				t.Errorf("%d admitted, want %d", n, tc.want)
			}
			// Above its share, a higher class is still admitted.
			if n < 20 {
				hold(t, l, Critical)
			}
		})
	}
}

// A slot that frees up goes to the highest class waiting, and within a
// class to the oldest.
func TestQueueAdmitsTheHighestClassFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, fixed(1, Options{MaxWait: time.Second, Shares: Shares{Default: 1, Sheddable: 1}}))
		s := hold(t, l, Critical)
		var (
			mu    sync.Mutex
			order []string
		)
		arrivals := []struct {
			name  string
			class Class
		}{{"sheddable 1", Sheddable}, {"default 1", Default}, {"sheddable 2", Sheddable}, {"critical", Critical}, {"default 2", Default}}
		var wg sync.WaitGroup
		for _, a := range arrivals {
			wg.Go(func() {
				s, adm, err := l.Acquire(context.Background(), a.class)
				if err != nil || !adm.Admitted {
					t.Errorf("%s: %+v, %v; want it admitted", a.name, adm, err)
					return
				}
				mu.Lock()
				order = append(order, a.name)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				s.Release(context.Background(), Ignored)
			})
			synctest.Wait() // it waits, in arrival order
		}
		if st := l.Stats(); st.Queued != len(arrivals) {
			t.Fatalf("%d queued, want %d", st.Queued, len(arrivals))
		}
		s.Release(context.Background(), Ignored)
		wg.Wait()
		want := []string{"critical", "default 1", "default 2", "sheddable 1", "sheddable 2"}
		if fmt.Sprint(order) != fmt.Sprint(want) {
			t.Errorf("admitted in the order %q, want %q", order, want)
		}
	})
}

// A request does not jump the queue: with requests of its class waiting,
// it waits too, even if a slot is free for a moment.
func TestQueueIsNotJumped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, fixed(1, Options{MaxWait: time.Second}))
		s := hold(t, l, Default)
		done := make(chan Admission)
		go func() {
			_, a, _ := l.Acquire(context.Background(), Default)
			done <- a
		}()
		synctest.Wait()
		if !l.st.queue.holds(Default) || l.st.queue.holds(Critical) {
			t.Fatal("the queue does not hold exactly the default request")
		}
		s.Release(context.Background(), Ignored)
		if a := <-done; !a.Admitted {
			t.Fatalf("the waiting request: %+v, want it admitted", a)
		}
	})
}

// No request waits longer than MaxWait: under a load three times what a
// fixed limit serves, arriving at random, every request is admitted or
// shed within MaxWait of its arrival, and the shed ones waited exactly
// MaxWait.
func TestQueueHoldsNoRequestLongerThanMaxWait(t *testing.T) {
	for _, maxWait := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 250 * time.Millisecond} {
		t.Run(maxWait.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := mustNew(t, fixed(4, Options{MaxWait: maxWait, MaxQueue: 1000}))
				rng := rand.New(rand.NewPCG(1, 2))
				var (
					mu       sync.Mutex
					waits    []time.Duration
					admitted int
					shed     int
				)
				var wg sync.WaitGroup
				for range 3000 {
					// 4 slots of 10ms serve 400 a second; 1200 arrive.
					time.Sleep(time.Duration(rng.ExpFloat64() * float64(time.Second) / 1200))
					c := Classes[rng.IntN(3)]
					wg.Go(func() {
						s, a, err := l.Acquire(context.Background(), c)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						waits = append(waits, a.Waited)
						if a.Admitted {
							admitted++
						} else {
							shed++
							if a.Reason != Timeout || a.Waited != maxWait {
								t.Errorf("shed after %v for %s, want after %v for timeout", a.Waited, a.Reason, maxWait)
							}
						}
						mu.Unlock()
						if a.Admitted {
							time.Sleep(10 * time.Millisecond)
							s.Release(context.Background(), Succeeded)
						}
					})
				}
				wg.Wait()
				for _, w := range waits {
					if w > maxWait {
						t.Fatalf("a request waited %v, longer than %v", w, maxWait)
					}
				}
				if admitted < 500 || shed < 500 {
					t.Errorf("%d admitted and %d shed, want both in the hundreds at least", admitted, shed)
				}
				if st := l.Stats(); st.Queued != 0 || st.InFlight != 0 {
					t.Errorf("after the load: %+v, want nothing queued or in flight", st)
				}
			})
		})
	}
}

// Once the queue has not emptied for MaxWait it serves the newest request
// of a class first: the oldest are closest to being shed, and their
// clients closest to giving up.
func TestStandingQueueServesTheNewestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, fixed(1, Options{MaxWait: 100 * time.Millisecond}))
		s := hold(t, l, Default)
		got := make(chan int, 3)
		for i := range 3 {
			go func() {
				s, a, _ := l.Acquire(context.Background(), Default)
				if a.Admitted {
					got <- i
					s.Release(context.Background(), Ignored)
				}
			}()
			synctest.Wait()
			time.Sleep(40 * time.Millisecond)
		}
		// The queue has held requests for 120ms: the newest goes first.
		s.Release(context.Background(), Ignored)
		if i := <-got; i != 2 {
			t.Errorf("request %d admitted first from a standing queue, want 2, the newest", i)
		}
	})
}

func TestShedReasons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, fixed(1, Options{MaxWait: time.Second, MaxQueue: 1}))
		s := hold(t, l, Critical)
		go l.Acquire(context.Background(), Critical)
		synctest.Wait()
		_, a, err := l.Acquire(context.Background(), Default)
		if err != nil || a.Admitted || a.Reason != QueueFull || a.Waited != 0 {
			t.Errorf("with the queue full: %+v, %v; want shed at once for queue_full", a, err)
		}
		s.Release(context.Background(), Ignored)
	})
}

// A request whose context ends while it waits leaves the queue, is not
// admitted, and gets the context's error.
func TestCanceledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, fixed(1, Options{MaxWait: time.Second}))
		s := hold(t, l, Default)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, a, err := l.Acquire(ctx, Default)
			if a.Admitted || a.Reason != NotShed || a.Waited != 100*time.Millisecond {
				t.Errorf("canceled: %+v, want not admitted nor shed, after 100ms", a)
			}
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
		if st := l.Stats(); st.Queued != 0 || st.InFlight != 1 {
			t.Errorf("%+v, want none queued and one in flight", st)
		}
		s.Release(context.Background(), Ignored)
		hold(t, l, Default)
	})
}

// A Limiter from WithOptions shares what l learned and holds: a slot held
// under one counts under the other.
func TestWithOptionsSharesTheState(t *testing.T) {
	l := mustNew(t, fixed(2, Options{Shares: Shares{Default: 1}}))
	s := hold(t, l, Default)
	l2, err := l.WithOptions(fixed(2, Options{Shares: Shares{Default: 0.5}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, a, _ := l2.Acquire(context.Background(), Default); a.Admitted {
		t.Error("l2 admitted a default request with 1 of 2 in flight under l, above its share of 50%")
	}
	hold(t, l, Default)
	s.Release(context.Background(), Ignored)
	if st := l2.Stats(); st.InFlight != 1 {
		t.Errorf("l2 sees %d in flight, want 1", st.InFlight)
	}
	if _, err := l.WithOptions(Options{Tolerance: -1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("WithOptions of bad options: %v, want ErrInvalidOptions", err)
	}
}

func TestReleaseTwice(t *testing.T) {
	l := mustNew(t, fixed(1, Options{}))
	s := hold(t, l, Default)
	s.Release(context.Background(), Succeeded)
	s.Release(context.Background(), Succeeded)
	if st := l.Stats(); st.InFlight != 0 {
		t.Fatalf("%d in flight after releasing one slot twice, want 0", st.InFlight)
	}
	hold(t, l, Default)
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o     Options
		field string // "" when valid
	}{
		{Options{}, ""},
		{Options{MinLimit: 5, MaxLimit: 5}, ""},
		{Options{MinLimit: -1}, "min limit"},
		{Options{MinLimit: 50, MaxLimit: 10}, "max limit"},
		{Options{MaxLimit: MaxLimit + 1}, "max limit"},
		{Options{InitialLimit: 2000}, "initial limit"},
		{Options{MinLimit: 30, InitialLimit: 10}, "initial limit"},
		{Options{Tolerance: -0.5}, "tolerance"},
		{Options{Tolerance: 11}, "tolerance"},
		{Options{Smoothing: 1.5}, "smoothing"},
		{Options{Window: time.Microsecond}, "window"},
		{Options{Percentile: 1}, "percentile"},
		{Options{ProbeInterval: 500 * time.Millisecond}, "probe interval"},
		{Options{Window: time.Second, ProbeInterval: 5 * time.Second}, "probe interval"},
		{Options{MaxWait: -time.Second}, "max wait"},
		{Options{MaxWait: 2 * time.Minute}, "max wait"},
		{Options{MaxQueue: -1}, "max queue"},
		{Options{Shares: Shares{Default: 1.5}}, "default share"},
		{Options{Shares: Shares{Default: 0.5, Sheddable: 0.6}}, "sheddable share"},
		{Options{Shares: Shares{Default: 0.5}}, ""}, // Sheddable's default follows
		{Options{RetryAfter: 1500 * time.Millisecond}, "retry after"},
		{Options{RetryAfter: 2 * time.Hour}, "retry after"},
	} {
		err := tc.o.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.o, err)
		case tc.field != "" && (!errors.Is(err, ErrInvalidOptions) || !contains(err.Error(), tc.field)):
			t.Errorf("%+v: %v, want ErrInvalidOptions naming %s", tc.o, err, tc.field)
		}
		if _, nerr := New(tc.o); (nerr == nil) != (err == nil) {
			t.Errorf("%+v: New says %v, Validate %v", tc.o, nerr, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestClass(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want Class
		ok   bool
	}{
		{"critical", Critical, true},
		{"Default", Default, true},
		{"SHEDDABLE", Sheddable, true},
		{"", 0, false},
		{"urgent", 0, false},
	} {
		c, err := ParseClass(tc.s)
		if (err == nil) != tc.ok || c != tc.want {
			t.Errorf("ParseClass(%q) = %v, %v; want %v (ok %v)", tc.s, c, err, tc.want, tc.ok)
		}
		if tc.ok && c.String() != lower(tc.s) {
			t.Errorf("%v.String() = %q, want %q", c, c.String(), lower(tc.s))
		}
	}
	if s := Class(7).String(); s != "class(7)" {
		t.Errorf("Class(7).String() = %q", s)
	}
	// An unknown class counts as Default.
	l := mustNew(t, fixed(10, Options{}))
	if s := hold(t, l, Class(9)); s.Class() != Default {
		t.Errorf("class %v, want default", s.Class())
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func FuzzParseClass(f *testing.F) {
	for _, s := range []string{"critical", "default", "sheddable", "Critical", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseClass(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("ParseClass(%q): %v, want ErrInvalidOptions", s, err)
			}
			return
		}
		if !c.valid() {
			t.Fatalf("ParseClass(%q) = %d, not a class", s, c)
		}
		if back, err := ParseClass(c.String()); err != nil || back != c {
			t.Fatalf("ParseClass(%q) = %v, which does not round-trip: %v, %v", s, c, back, err)
		}
	})
}

// A probe holds back the classes but critical: with the limit at 40 and
// the first probe's at 18, default requests stop at 90% of 18, critical
// ones go on to 40; only the requests admitted with 18 or fewer in flight
// measure the probe.
func TestProbeDoesNotHoldBackCriticalRequests(t *testing.T) {
	l := mustNew(t, Options{InitialLimit: 40})
	n := 0
	for {
		_, a, _ := l.Acquire(context.Background(), Default)
		if !a.Admitted {
			if a.Limit != 18 {
				t.Errorf("a default request refused under a limit of %d, want the probe's 18", a.Limit)
			}
			break
		}
		n++
	}
	if st := l.Stats(); n != 16 || !st.Probing || st.Limit != 18 {
		t.Fatalf("%d default requests admitted, stats %+v; want 16 during a probe at 18", n, st)
	}
	var slots []*Slot
	for range 40 - 16 {
		slots = append(slots, hold(t, l, Critical))
	}
	if _, a, _ := l.Acquire(context.Background(), Critical); a.Admitted || a.Limit != 40 {
		t.Errorf("the 41st request: %+v, want critical refused under 40", a)
	}
	measuring := 0
	for _, s := range slots {
		if s.probe != 0 {
			measuring++
		}
	}
	if measuring != 2 {
		t.Errorf("%d critical requests measure the probe, want 2 (admitted with 17 and 18 in flight)", measuring)
	}
}
