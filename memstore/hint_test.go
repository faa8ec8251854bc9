package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// A key denied a request of cost 1 is answered again without the shard's
// lock: with the lock held by someone else, its repeats still come back,
// denied, with the same answer the locked path gives, RetryAfter counting
// down with the clock. Other keys, and costs other than 1, wait for the lock.
func TestDenyHintAnswersWithoutTheLock(t *testing.T) {
	ctx := context.Background()
	s, clk := testStore(t, Options{Shards: 1})
	p := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: time.Hour},
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 100, Period: time.Hour})
	for range 3 {
		if d, _ := s.Take(ctx, p, "k", 1); !d.Allowed {
			t.Fatal("a request within the limit was denied")
		}
	}
	first, _ := s.Take(ctx, p, "k", 1)
	if first.Allowed || first.RetryAfter != 20*time.Minute {
		t.Fatalf("fourth request: %+v, want denied for 20m", first)
	}
	clk.Advance(time.Minute)
	sh := &s.shards[0]
	sh.mu.Lock()
	got := make(chan sluice.Decision)
	go func() {
		d, _ := s.Take(ctx, p, "k", 1)
		got <- d
	}()
	var hinted sluice.Decision
	select {
	case hinted = <-got:
	case <-time.After(10 * time.Second):
		sh.mu.Unlock()
		t.Fatal("a hinted denial waited for the shard's lock")
	}
	// Another key must wait for the lock.
	other := make(chan struct{})
	go func() {
		s.Take(ctx, p, "other", 1)
		close(other)
	}()
	sh.mu.Unlock()
	<-other
	locked, _ := s.Peek(ctx, p, "k")
	if hinted.Allowed || hinted.RetryAfter != 19*time.Minute || hinted.Limit != locked.Limit ||
		hinted.Index != locked.Index || hinted.Remaining != locked.Remaining || hinted.ResetAfter != locked.ResetAfter {
		t.Errorf("hinted denial %+v, want denied for 19m like the store's own state %+v", hinted, locked)
	}
	// Once the denial has run out, the request is decided afresh.
	clk.Advance(19 * time.Minute)
	if d, _ := s.Take(ctx, p, "k", 1); !d.Allowed {
		t.Errorf("after the retry time: %+v, want admitted", d)
	}
}

// Whatever gives quota back clears the hint: Reset, and Cancel of a
// reservation; a reservation, which takes more, clears it too, so that the
// next denial says the longer wait.
func TestDenyHintCleared(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		do    func(*Store, *sluice.Policy) error
		allow bool // whether the next request is admitted
		retry time.Duration
	}{
		{"reset", func(s *Store, p *sluice.Policy) error { return s.Reset(ctx, p, "k") }, true, 0},
		{"cancel", func(s *Store, p *sluice.Policy) error {
			return s.Cancel(ctx, p, "k", 1, time.Unix(0, s.now()).Add(time.Hour))
		}, true, 0},
		{"reserve", func(s *Store, p *sluice.Policy) error {
			_, err := s.Reserve(ctx, p, "k", 1, time.Hour)
			return err
		}, false, 40 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := testStore(t, Options{Shards: 1})
			p := testPolicy(t, sluice.Limit{Algorithm: sluice.GCRA, Count: 3, Period: time.Hour})
			for range 4 {
				s.Take(ctx, p, "k", 1)
			}
			if d, _ := s.Take(ctx, p, "k", 1); d.Allowed || d.RetryAfter != 20*time.Minute {
				t.Fatalf("denied key: %+v, want denied for 20m", d)
			}
			if err := c.do(s, p); err != nil {
				t.Fatal(err)
			}
			d, _ := s.Take(ctx, p, "k", 1)
			if d.Allowed != c.allow || (!d.Allowed && d.RetryAfter != c.retry) {
				t.Errorf("after %s: %+v, want Allowed=%v (RetryAfter %v when denied)", c.name, d, c.allow, c.retry)
			}
		})
	}
}

// A batch holding a request that its shard has just denied is denied
// without taking any lock, the other requests left undecided; once the
// denial runs out, the batch is decided and charged as usual.
func TestDenyHintDeniesBatchWithoutLocks(t *testing.T) {
	ctx := context.Background()
	s, clk := testStore(t, Options{Shards: 1})
	tight := testPolicy(t, sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Minute})
	loose := testPolicy(t, sluice.Limit{Algorithm: sluice.FixedWindow, Count: 100, Period: time.Minute})
	reqs := []sluice.Request{{Policy: loose, Key: "ip", N: 1}, {Policy: tight, Key: "user", N: 1}}
	out := make([]sluice.Decision, 2)
	for i, want := range []bool{true, false} {
		if ok, err := s.TakeAll(ctx, reqs, out); err != nil || ok != want {
			t.Fatalf("batch %d: %v %v, want %v", i, ok, err, want)
		}
	}
	sh := &s.shards[0]
	sh.mu.Lock()
	done := make(chan bool)
	go func() {
		ok, _ := s.TakeAll(ctx, reqs, out)
		done <- ok
	}()
	select {
	case ok := <-done:
		sh.mu.Unlock()
		if ok || out[1].Allowed || out[1].RetryAfter != time.Minute || !out[0].Time.IsZero() {
			t.Errorf("hinted batch: %v %+v, want denied by tight for 1m, loose undecided", ok, out)
		}
	case <-time.After(10 * time.Second):
		sh.mu.Unlock()
		t.Fatal("a batch with a hinted denial waited for the shard's lock")
	}
	clk.Advance(time.Minute)
	if ok, _ := s.TakeAll(ctx, reqs, out); !ok {
		t.Errorf("after the window: %+v, want admitted", out)
	}
	if d, _ := s.Peek(ctx, loose, "ip"); d.Remaining != 99 {
		t.Errorf("loose: %d remaining, want 99 (charged by the admitted batch of this window only)", d.Remaining)
	}
}

// Eviction spares the hinted key, but never at the cost of the hard cap:
// a shard whose only entry is the hinted key's still evicts it for a new
// key.
func TestDenyHintKeepsTheCap(t *testing.T) {
	ctx := context.Background()
	s, _ := testStore(t, Options{Shards: 1, MaxKeys: 1})
	p := testPolicy(t, sluice.Limit{Algorithm: sluice.FixedWindow, Count: 1, Period: time.Hour})
	s.Take(ctx, p, "a", 1)
	if d, _ := s.Take(ctx, p, "a", 1); d.Allowed {
		t.Fatal("second request within the hour admitted")
	}
	if s.shards[0].hint.policy.Load() != p {
		t.Fatal("the denial did not take the shard's hint")
	}
	for _, k := range []string{"b", "c", "d"} {
		if d, _ := s.Take(ctx, p, k, 1); !d.Allowed {
			t.Errorf("new key %s: denied, want admitted", k)
		}
		if n := s.Len(); n > 1 {
			t.Errorf("after key %s: Len %d, want at most MaxKeys 1", k, n)
		}
	}
}
