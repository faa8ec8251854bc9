package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// remaining is how long ctx has left, failing t if it has no deadline.
func remaining(t *testing.T, ctx context.Context) time.Duration {
	t.Helper()
	at, ok := ctx.Deadline()
	if !ok {
		t.Fatal("the bounded context has no deadline")
	}
	return time.Until(at)
}

// TestDeadlinesShared checks that calls that cannot be cancelled share a
// deadline for a sixteenth of the timeout, that every call's wait ends
// between 15/16 of the timeout and the timeout, and that a shared deadline
// expires exactly when it says.
func TestDeadlinesShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 160 * time.Millisecond
		d := &deadlines{timeout: timeout}
		first, cancel := d.bound(context.Background())
		cancel()
		if got := remaining(t, first); got != timeout {
			t.Fatalf("first call: %v left, want %v", got, timeout)
		}
		time.Sleep(timeout / 16)
		if again, _ := d.bound(context.Background()); again != first {
			t.Fatalf("a call %v later got a new deadline, want the shared one", timeout/16)
		}
		time.Sleep(time.Nanosecond)
		next, _ := d.bound(context.Background())
		if next == first {
			t.Fatalf("a call %v later still got the first deadline, with %v left", timeout/16+time.Nanosecond, remaining(t, first))
		}
		if got := remaining(t, next); got != timeout {
			t.Fatalf("renewed deadline: %v left, want %v", got, timeout)
		}

		time.Sleep(remaining(t, first) - time.Nanosecond)
		synctest.Wait()
		if err := first.Err(); err != nil {
			t.Fatalf("shared deadline ended 1ns early: %v", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if err := first.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("shared deadline at its end: %v, want DeadlineExceeded", err)
		}

		rng := rand.New(rand.NewPCG(1, 2))
		contexts := map[context.Context]bool{}
		for range 2000 {
			time.Sleep(time.Duration(rng.Int64N(int64(timeout / 40))))
			ctx, _ := d.bound(context.Background())
			contexts[ctx] = true
			if left := remaining(t, ctx); left < timeout*15/16 || left > timeout {
				t.Fatalf("a call got %v, want between %v and %v", left, timeout*15/16, timeout)
			}
			if err := ctx.Err(); err != nil {
				t.Fatalf("a call got a context that has already ended: %v", err)
			}
		}
		if len(contexts) > 2000/5 {
			t.Errorf("%d calls a few ms apart made %d deadlines, want them shared", 2000, len(contexts))
		}

		d.stop()
		if last, _ := d.bound(context.Background()); !errors.Is(last.Err(), context.Canceled) {
			t.Errorf("after stop the shared deadline is %v, want Canceled", last.Err())
		}
	})
}

type ctxKey struct{}

// TestDeadlinesCallerContext checks the calls whose context is more than
// context.Background: an earlier deadline is kept, a cancellable context
// gets the whole timeout and still ends when its caller cancels, and values
// reach the client.
func TestDeadlinesCallerContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		d := &deadlines{timeout: timeout}

		sooner, cancelSooner := context.WithTimeout(context.Background(), timeout/2)
		defer cancelSooner()
		if got, _ := d.bound(sooner); got != sooner {
			t.Error("a context that ends before the timeout was replaced")
		}

		later, cancelLater := context.WithTimeout(context.Background(), 2*timeout)
		defer cancelLater()
		got, release := d.bound(later)
		if left := remaining(t, got); left != timeout {
			t.Errorf("a context ending after the timeout: %v left, want %v", left, timeout)
		}
		release()
		if !errors.Is(got.Err(), context.Canceled) || later.Err() != nil {
			t.Errorf("release: bound context %v, caller's %v; want Canceled and nil", got.Err(), later.Err())
		}

		caller, cancelCaller := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		got, release = d.bound(caller)
		defer release()
		if left := remaining(t, got); left != timeout {
			t.Errorf("a cancellable context: %v left, want %v", left, timeout)
		}
		cancelCaller()
		if !errors.Is(got.Err(), context.Canceled) {
			t.Errorf("the caller cancelled, the bound context is %v, want Canceled", got.Err())
		}

		valued := context.WithValue(context.Background(), ctxKey{}, "v")
		got, _ = d.bound(valued)
		if v := got.Value(ctxKey{}); v != "v" {
			t.Errorf("Value through the bound context: %v, want the caller's %q", v, "v")
		}
		if left := remaining(t, got); left != timeout {
			t.Errorf("a context with values: %v left, want %v", left, timeout)
		}
		shared, _ := d.bound(context.TODO())
		if sd, _ := got.Deadline(); sd != d.shared.Load().at || shared != d.shared.Load().ctx {
			t.Error("context.TODO and a context with values do not share the deadline")
		}
		d.stop()
	})
}

// TestDeadlinesAllocs checks that a call that cannot be cancelled allocates
// nothing for its deadline.
func TestDeadlinesAllocs(t *testing.T) {
	d := &deadlines{timeout: time.Hour}
	defer d.stop()
	allocs := testing.AllocsPerRun(1000, func() {
		_, release := d.bound(context.Background())
		release()
	})
	if allocs != 0 {
		t.Errorf("bound(context.Background()) allocates %v times per call, want 0", allocs)
	}
}
