package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Redis works in microseconds: a limit whose period is not a whole number
// of them is refused with ErrUnsupportedLimit by every method, whatever
// OnError says: it is the caller's mistake, not a Redis failure, so it is
// never turned into a degraded admission.
func TestUnsupportedPeriod(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, OnError: redisstore.Allow, Timeout: slow})
	ok := sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second}
	odd := sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second + 500*time.Nanosecond}
	if err := odd.Validate(); err != nil {
		t.Fatalf("the limit %v must be valid for sluice, to test the store: %v", odd, err)
	}
	ctx := context.Background()
	for _, limits := range [][]sluice.Limit{{odd}, {ok, odd}} {
		p := policy(t, "odd", limits...)
		calls := map[string]func() error{
			"Take":    func() error { _, err := store.Take(ctx, p, "k", 1); return err },
			"Peek":    func() error { _, err := store.Peek(ctx, p, "k"); return err },
			"Reserve": func() error { _, err := store.Reserve(ctx, p, "k", 1, time.Second); return err },
			"Cancel":  func() error { return store.Cancel(ctx, p, "k", 1, time.Now().Add(time.Second)) },
			"Reset":   func() error { return store.Reset(ctx, p, "k") },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, redisstore.ErrUnsupportedLimit) {
				t.Errorf("%s with limits %v: got error %v, want one wrapping ErrUnsupportedLimit", name, limits, err)
			} else if !strings.Contains(err.Error(), "limit 1") && len(limits) == 2 {
				t.Errorf("%s with limits %v: error %q does not name limit 1", name, limits, err)
			}
		}
	}
	if keys := srv.DoList(t, "KEYS", "*"); len(keys) != 0 {
		t.Errorf("keys written: %q, want none", keys)
	}
}

// CheckLimit lets a configuration loader refuse, before serving, what the
// store's methods would refuse on every decision: a valid limit whose period
// is not a whole number of microseconds (ErrUnsupportedLimit) and an invalid
// limit (sluice.ErrInvalidLimit); it accepts what the store runs.
func TestCheckLimit(t *testing.T) {
	tests := []struct {
		limit sluice.Limit
		want  error // nil: accepted
	}{
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second}, nil},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Count: 3, Period: time.Microsecond, Burst: 5}, nil},
		{sluice.Limit{Algorithm: sluice.SlidingLog, Count: 3, Period: 1500 * time.Microsecond}, nil},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Second + 500*time.Nanosecond}, redisstore.ErrUnsupportedLimit},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 1, Period: 999 * time.Nanosecond}, redisstore.ErrUnsupportedLimit},
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 0, Period: time.Second}, sluice.ErrInvalidLimit},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10, Period: time.Second, Burst: 3}, sluice.ErrInvalidLimit},
	}
	for _, tt := range tests {
		err := redisstore.CheckLimit(tt.limit)
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("CheckLimit(%v): got %v, want nil", tt.limit, err)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("CheckLimit(%v): got %v, want an error wrapping %v", tt.limit, err, tt.want)
		case errors.Is(err, redisstore.ErrUnsupportedLimit) && !strings.Contains(err.Error(), "microseconds"):
			t.Errorf("CheckLimit(%v): error %q does not say why", tt.limit, err)
		}
	}
}

// New fails with an error naming the problem, and within a bound, when it
// cannot build a client or reach Redis.
func TestNewFails(t *testing.T) {
	// A port nothing listens on (refused at once).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	// A port that accepts connections and never answers: New waits for
	// the client's dial timeout (rueidis's default, 5s; Options.Timeout does
	// not apply to New).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() }) // after the parallel subtests
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	cases := []struct {
		name  string
		opts  redisstore.Options
		want  string // in the error
		bound time.Duration
	}{
		{"no address", redisstore.Options{}, "no Redis address", time.Second},
		{"bad port", redisstore.Options{URL: "redis://host:notaport"}, "redisstore: url", time.Second},
		{"bad scheme", redisstore.Options{URL: "http://" + closed}, "redisstore: url", time.Second},
		{"bad host", redisstore.Options{URL: "redis://[::1"}, "redisstore: url", time.Second},
		{"bad db", redisstore.Options{URL: "redis://" + closed + "/abc"}, "redisstore: url", time.Second},
		{"no scheme", redisstore.Options{URL: "::::"}, "redisstore: url", time.Second},
		{"bad OnError", redisstore.Options{URL: "redis://" + closed, OnError: 7}, "OnError", time.Second},
		{"refused", redisstore.Options{URL: "redis://" + closed}, "redisstore: connecting to " + closed, 3 * time.Second},
		{"refused addrs", redisstore.Options{Addrs: []string{closed}}, "redisstore: connecting to " + closed, 3 * time.Second},
		{"no socket", redisstore.Options{URL: "unix://" + t.TempDir() + "/none.sock"}, "redisstore: connecting", 3 * time.Second},
		{"silent", redisstore.Options{URL: "redis://" + silent.Addr().String(), Timeout: 100 * time.Millisecond}, "redisstore: connecting to " + silent.Addr().String(), 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			type result struct {
				s   *redisstore.Store
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				s, err := redisstore.New(c.opts)
				done <- result{s, err}
			}()
			select {
			case r := <-done:
				took := time.Since(start)
				if r.s != nil {
					r.s.Close()
				}
				if r.err == nil || !strings.Contains(r.err.Error(), c.want) {
					t.Errorf("New(%+v): got error %v, want one containing %q", c.opts, r.err, c.want)
				}
				if took > c.bound {
					t.Errorf("New(%+v) took %v, want at most %v", c.opts, took, c.bound)
				}
				t.Logf("failed after %v: %v", took.Round(time.Millisecond), r.err)
			case <-time.After(c.bound + 10*time.Second):
				t.Fatalf("New(%+v) still running after %v: it hangs", c.opts, c.bound+10*time.Second)
			}
		})
	}
}
