package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clock"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// keysOf returns srv's keys that start with prefix.
func keysOf(t *testing.T, srv *redistest.Server, prefix string) []string {
	t.Helper()
	var out []string
	for _, k := range srv.DoList(t, "KEYS", "*") {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// pttl returns the PTTL of key in ms; -1 means no TTL, -2 no key.
func pttl(t *testing.T, srv *redistest.Server, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(srv.Do(t, "PTTL", key), 10, 64)
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return v
}

// serverMicros returns srv's TIME in µs since the Unix epoch.
func serverMicros(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	tm := srv.DoList(t, "TIME")
	sec, err1 := strconv.ParseInt(tm[0], 10, 64)
	us, err2 := strconv.ParseInt(tm[1], 10, 64)
	if err1 != nil || err2 != nil || len(tm) != 2 {
		t.Fatalf("TIME answered %q", tm)
	}
	return sec*1e6 + us
}

// ceilMs returns d in milliseconds, rounded up.
func ceilMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// After one request at the server's time, the store holds one key per limit
// (two for sliding_log), each with a TTL of the time until its state is
// fresh again, rounded up to the millisecond: never longer than the
// algorithm needs.
func TestKeyTTLAfterOneRequest(t *testing.T) {
	srv := redistest.Start(t)
	cases := []struct {
		limit sluice.Limit
		keys  int
		// bound returns the longest TTL in ms the algorithm may need, given
		// the server's time in µs just before the request.
		bound func(before int64) int64
	}{
		{sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second}, 1,
			func(int64) int64 { return 100 }}, // one emission interval
		{sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second, Burst: 20}, 1,
			func(int64) int64 { return 100 }}, // one token's refill
		{sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Minute}, 1,
			func(before int64) int64 { // the rest of the current window
				const p = int64(time.Minute / time.Microsecond)
				return (p - before%p + 999) / 1000
			}},
		{sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 5, Period: time.Minute}, 1,
			func(before int64) int64 { // the rest of this window and all the next
				const p = int64(time.Minute / time.Microsecond)
				return (2*p - before%p + 999) / 1000
			}},
		{sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: 3 * time.Second}, 2,
			func(int64) int64 { return 3000 }}, // the request leaves the log
	}
	for i, c := range cases {
		t.Run(c.limit.String(), func(t *testing.T) {
			prefix := fmt.Sprintf("ttl%d", i)
			store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Prefix: prefix, Timeout: slow})
			lim := limiter(t, store, "p", c.limit)
			before := serverMicros(t, srv)
			asked := time.Now() // Redis decides after this
			d := allow(t, lim, "k")
			if !d.Allowed || d.Degraded {
				t.Fatalf("first request: got %+v, want allowed and not degraded", d)
			}
			keys := keysOf(t, srv, prefix+":")
			if len(keys) != c.keys {
				t.Fatalf("keys: got %q, want %d keys", keys, c.keys)
			}
			for _, k := range keys {
				ms := pttl(t, srv, k)
				elapsed := ceilMs(time.Since(asked))
				if ms <= 0 {
					t.Errorf("PTTL %s: got %d, want a TTL", k, ms)
				}
				if b := c.bound(before); ms > b {
					t.Errorf("PTTL %s: got %dms, want at most %dms", k, ms, b)
				}
				// Exactly ResetAfter, rounded up, minus what has run since.
				if want := ceilMs(d.ResetAfter); ms > want || ms < want-elapsed-1 {
					t.Errorf("PTTL %s: got %dms, want %dms (ResetAfter %v, rounded up) less the %dms since the decision", k, ms, want, d.ResetAfter, elapsed)
				}
			}
		})
	}
}

// Whatever the traffic (every algorithm, several limits, costs above one,
// reservations and cancellations), every key the store writes has a TTL and
// none outlives what its limit can need.
func TestEveryKeyExpires(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Prefix: "every", Timeout: slow})
	windows := limiter(t, store, "windows",
		sluice.Limit{Algorithm: sluice.FixedWindow, Count: 7, Period: 2 * time.Second},
		sluice.Limit{Algorithm: sluice.SlidingWindow, Count: 9, Period: 3 * time.Second},
		sluice.Limit{Algorithm: sluice.SlidingLog, Count: 6, Period: time.Second})
	buckets := limiter(t, store, "buckets",
		sluice.Limit{Algorithm: sluice.GCRA, Count: 20, Period: time.Second, Burst: 5},
		sluice.Limit{Algorithm: sluice.TokenBucket, Count: 3, Period: time.Second, Burst: 4})
	const maxWait = 500 * time.Millisecond
	// longest is, per limit's key, the longest its state can need: a
	// bucket's time to refill from empty (plus maxWait of reservations),
	// a fixed window, two sliding windows, a log's period.
	longest := map[string]time.Duration{
		"{7:windows:%s}:0":   2 * time.Second,
		"{7:windows:%s}:1":   6 * time.Second,
		"{7:windows:%s}:2":   time.Second,
		"{7:windows:%s}:2:m": time.Second,
		"{7:buckets:%s}:0":   5*50*time.Millisecond + maxWait,
		"{7:buckets:%s}:1":   4*time.Second/3 + maxWait,
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		key := fmt.Sprintf("k%d", rng.IntN(4))
		n := 1 + rng.Int64N(3)
		var err error
		switch rng.IntN(6) {
		case 0:
			_, err = windows.Peek(ctx, key)
		case 1, 2:
			_, err = windows.AllowN(ctx, key, n)
		case 3:
			_, err = buckets.AllowN(ctx, key, n)
		case 4:
			var r sluice.Reservation
			r, err = buckets.Reserve(ctx, key, n, maxWait)
			if err == nil && rng.IntN(2) == 0 {
				err = r.Cancel(ctx)
			}
		case 5:
			if rng.IntN(10) == 0 {
				err = windows.Reset(ctx, key)
			} else {
				_, err = buckets.Peek(ctx, key)
			}
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	keys := keysOf(t, srv, "every:")
	if len(keys) == 0 {
		t.Fatal("no keys written")
	}
	for _, k := range keys {
		ms := pttl(t, srv, k)
		if ms <= 0 {
			t.Errorf("PTTL %s: got %d, want a TTL", k, ms)
			continue
		}
		found := false
		for layout, max := range longest {
			for i := range 4 {
				if k == "every:"+fmt.Sprintf(layout, fmt.Sprintf("k%d", i)) {
					found = true
					if ms > ceilMs(max) {
						t.Errorf("PTTL %s: got %dms, want at most %dms", k, ms, ceilMs(max))
					}
				}
			}
		}
		if !found {
			t.Errorf("unexpected key %s", k)
		}
	}
}

// A refund can leave a token bucket owing more than it holds (reservations
// still to come): its state is then anchored in the future, at the first
// microsecond at which the debt fits. Its key must still live until the
// whole debt is repaid; a key that expired earlier would let Redis drop the
// debt, and the bucket would restart full while clients are still owed
// waits. Both scripts: plain arithmetic and big numbers.
func TestKeyTTLAfterRefundOfDebt(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct {
		name  string
		limit sluice.Limit
		wide  bool
	}{
		{"plain", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second}, false},
		{"wide", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 999999937, Period: time.Second}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewFake(epoch)
			store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Prefix: "refund-" + c.name, Clock: clk, Timeout: slow})
			lim := limiter(t, store, "p", c.limit)
			if got := redisstore.Wide(store, lim.Policy()); got != c.wide {
				t.Fatalf("decided by the script for big numbers: %v, want %v", got, c.wide)
			}
			ctx := context.Background()
			// Three reservations of a whole burst: now, in one period and in
			// two. Refunding the last leaves two bursts owed: one more than
			// the bucket holds.
			n := c.limit.Count
			var last sluice.Reservation
			for i := range 3 {
				r, err := lim.Reserve(ctx, "k", n, time.Minute)
				if err != nil || !r.Allowed || r.Delay != time.Duration(i)*c.limit.Period {
					t.Fatalf("reservation %d: got %+v, %v; want allowed after %v", i, r.Decision, err, time.Duration(i)*c.limit.Period)
				}
				last = r
			}
			asked := time.Now()
			if err := last.Cancel(ctx); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			d, err := lim.Peek(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			owed := 2 * c.limit.Period
			if d.Remaining != 0 || d.ResetAfter != owed {
				t.Fatalf("after the refund: got %d remaining, reset after %v; want 0 and %v", d.Remaining, d.ResetAfter, owed)
			}
			keys := keysOf(t, srv, "refund-"+c.name+":")
			if len(keys) != 1 {
				t.Fatalf("keys: got %q, want the bucket's state only", keys)
			}
			// With a caller's clock every TTL has an hour of slack (the
			// server's clock need not follow the fake one).
			ms := pttl(t, srv, keys[0]) - int64(time.Hour/time.Millisecond)
			if want := ceilMs(owed); ms > want || ms < want-ceilMs(time.Since(asked))-1 {
				t.Errorf("PTTL %s: got %dms beyond the slack, want %dms (until the debt is repaid) less the time since the refund", keys[0], ms, want)
			}
		})
	}
}

// A sliding log holds one member per admitted request in the last period,
// so never more than the limit, however many requests it sees.
func TestSlidingLogSizeBounded(t *testing.T) {
	srv := redistest.Start(t)
	store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Prefix: "zc", Timeout: slow, DenyCache: -1})
	lim := limiter(t, store, "p", sluice.Limit{Algorithm: sluice.SlidingLog, Count: 5, Period: 20 * time.Millisecond})
	rng := rand.New(rand.NewPCG(3, 4))
	admitted := 0
	for i := range 300 {
		d, err := lim.AllowN(context.Background(), "k", 1+rng.Int64N(2))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
		keys := keysOf(t, srv, "zc:")
		for _, k := range keys {
			if !strings.HasSuffix(k, ":m") {
				continue // the state key; the entries are in the auxiliary key
			}
			if n, _ := strconv.Atoi(srv.Do(t, "ZCARD", k)); n > 5 {
				t.Fatalf("after request %d: ZCARD %s = %d, want at most 5", i, k, n)
			}
		}
	}
	if admitted <= 5 {
		t.Errorf("admitted %d of 300 over the test's run, want the log to have moved on", admitted)
	}
}

// Requests admitted at the same microsecond each get their own member of
// the log: none overwrites another, so the log counts every one.
func TestSlidingLogMembersUnique(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epoch)
	var lims []*sluice.Limiter
	for range 2 {
		store := open(t, redisstore.Options{URL: "redis://" + srv.Addr, Prefix: "uniq", Clock: clk, Timeout: slow})
		lims = append(lims, limiter(t, store, "p", sluice.Limit{Algorithm: sluice.SlidingLog, Count: 300, Period: time.Second}))
	}
	if got := hammer(t, lims, "k", 10, 20); got != 300 {
		t.Errorf("admitted %d of 400 at one instant, want 300", got)
	}
	var zset string
	for _, k := range keysOf(t, srv, "uniq:") {
		if strings.HasSuffix(k, ":m") {
			zset = k
		}
	}
	if got := srv.Do(t, "ZCARD", zset); got != "300" {
		t.Errorf("ZCARD %s: got %s, want 300", zset, got)
	}
	// With a caller's clock the TTL is padded by an hour (documented):
	// the server's clock need not follow the fake one.
	if ms := pttl(t, srv, zset); ms <= 0 || ms > ceilMs(time.Hour+time.Second) {
		t.Errorf("PTTL %s: got %dms, want 1 to %dms", zset, ms, ceilMs(time.Hour+time.Second))
	}
}

// On a cluster, every key of one limited entity (all limits of a policy,
// and the log's auxiliary key) is in one hash slot, whatever characters the
// key holds; and Reset deletes them all.
func TestKeysShareSlotAndReset(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	store := open(t, redisstore.Options{URL: clusterURL(nodes), Prefix: "slot", Timeout: slow})
	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Count: 10, Period: time.Second},
		{Algorithm: sluice.TokenBucket, Count: 10, Period: time.Second},
		{Algorithm: sluice.FixedWindow, Count: 100, Period: time.Minute},
		{Algorithm: sluice.SlidingWindow, Count: 100, Period: time.Minute},
		{Algorithm: sluice.SlidingLog, Count: 50, Period: time.Minute},
	}
	lim := limiter(t, store, "pol", limits...)
	entities := []string{"user:1", "{x}", "a}b{c", "", "名字", "with space", "*?[", "10.0.0.1", "2001:db8::1"}
	for _, e := range entities {
		for range 3 {
			if d := allow(t, lim, e); !d.Allowed || d.Degraded {
				t.Fatalf("entity %q: got %+v, want allowed, not degraded", e, d)
			}
		}
	}
	// Every key, with the node that holds it.
	where := map[string]*redistest.Server{}
	for _, n := range nodes {
		for _, k := range keysOf(t, n, "slot:") {
			where[k] = n
		}
	}
	for _, e := range entities {
		// The documented layout: <prefix>:{<length of P>:<P>:<K>}:<i>:...
		base := fmt.Sprintf("slot:{%d:%s:%s}:", len("pol"), "pol", e)
		var keys []string
		for k := range where {
			if strings.HasPrefix(k, base) {
				keys = append(keys, k)
			}
		}
		if len(keys) != len(limits)+1 {
			t.Errorf("entity %q: got keys %q, want %d", e, keys, len(limits)+1)
			continue
		}
		slot := nodes[0].Do(t, "CLUSTER", "KEYSLOT", keys[0])
		for _, k := range keys[1:] {
			if s := nodes[0].Do(t, "CLUSTER", "KEYSLOT", k); s != slot || where[k] != where[keys[0]] {
				t.Errorf("entity %q: key %s in slot %s on %s, key %s in slot %s on %s, want one slot", e, keys[0], slot, where[keys[0]].Addr, k, s, where[k].Addr)
			}
		}
		if err := lim.Reset(context.Background(), e); err != nil {
			t.Fatalf("Reset(%q): %v", e, err)
		}
		for _, k := range keys {
			if got := where[k].Do(t, "EXISTS", k); got != "0" {
				t.Errorf("entity %q: after Reset, EXISTS %s = %s, want 0", e, k, got)
			}
		}
		d := allow(t, lim, e)
		if want := (sluice.Decision{Allowed: true, Limit: 10, Remaining: 9, Index: 0}); d.Allowed != want.Allowed || d.Remaining != want.Remaining || d.Limit != want.Limit {
			t.Errorf("entity %q: after Reset got %+v, want a fresh key: %+v", e, d, want)
		}
	}
}

// Two policies share counters only if they have the same name and the same
// limits (sluice.Policy's promise, which memstore keeps). A Redis key that
// joined policy name and key with a bare colon would put policy "a:b" with
// key "c" and policy "a" with key "b:c" on one counter.
func TestPoliciesDoNotShareState(t *testing.T) {
	srv := redistest.Start(t)
	limit := sluice.Limit{Algorithm: sluice.GCRA, Count: 2, Period: time.Hour}
	mem := memstore.New(memstore.Options{})
	defer mem.Close()
	stores := []struct {
		name  string
		store sluice.Store
	}{
		{"memstore", mem},
		{"redisstore", open(t, redisstore.Options{URL: "redis://" + srv.Addr, Timeout: slow})},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			first := limiter(t, s.store, "a:b", limit)
			second := limiter(t, s.store, "a", limit)
			allow(t, first, "c")
			allow(t, first, "c")
			if d := allow(t, first, "c"); d.Allowed {
				t.Fatalf("policy a:b key c, third request: got allowed, want denied")
			}
			if d := allow(t, second, "b:c"); !d.Allowed || d.Remaining != 1 {
				t.Errorf("policy a key b:c, first request: got Allowed=%v Remaining=%d, want Allowed=true Remaining=1 (a fresh counter)", d.Allowed, d.Remaining)
			}
		})
	}
}
