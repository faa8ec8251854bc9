package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// epoch is a fake clock's start: aligned to every window the tests use.
var epoch = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)

// open returns a store built from opts (which must locate Redis) and closes
// it when t ends.
func open(t *testing.T, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// clusterURL returns the URL of a cluster with every node named.
func clusterURL(nodes []*redistest.Server) string {
	u := "redis://" + nodes[0].Addr
	for i, n := range nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.Addr
	}
	return u
}

// limiter returns a limiter of store for a policy of the given limits.
func limiter(t *testing.T, store sluice.Store, name string, limits ...sluice.Limit) *sluice.Limiter {
	t.Helper()
	l, err := sluice.New(store, name, limits...)
	if err != nil {
		t.Fatalf("sluice.New(%q, %v): %v", name, limits, err)
	}
	return l
}

// policy returns a policy of the given limits.
func policy(t *testing.T, name string, limits ...sluice.Limit) *sluice.Policy {
	t.Helper()
	p, err := sluice.NewPolicy(name, limits...)
	if err != nil {
		t.Fatalf("sluice.NewPolicy(%q, %v): %v", name, limits, err)
	}
	return p
}

// allow makes one decision and fails t on an error.
func allow(t *testing.T, l *sluice.Limiter, key string) sluice.Decision {
	t.Helper()
	d, err := l.Allow(context.Background(), key)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return d
}

// hammer makes perWorker decisions for key on each of workers goroutines per
// limiter, all at once, and returns how many were admitted. Any error or
// degraded decision fails t.
func hammer(t *testing.T, lims []*sluice.Limiter, key string, workers, perWorker int) int {
	t.Helper()
	return hammerCtx(t, context.Background(), lims, key, workers, perWorker)
}

// hammerCtx is hammer with every decision made with ctx.
func hammerCtx(t *testing.T, ctx context.Context, lims []*sluice.Limiter, key string, workers, perWorker int) int {
	t.Helper()
	var admitted, bad atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, l := range lims {
		for range workers {
			wg.Go(func() {
				<-start
				for range perWorker {
					d, err := l.Allow(ctx, key)
					switch {
					case err != nil:
						bad.Add(1)
						first.CompareAndSwap(nil, fmt.Sprintf("error: %v", err))
					case d.Degraded:
						bad.Add(1)
						first.CompareAndSwap(nil, fmt.Sprintf("degraded decision: %+v", d))
					case d.Allowed:
						admitted.Add(1)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d decisions failed; the first: %v", n, len(lims)*workers*perWorker, first.Load())
	}
	return int(admitted.Load())
}

// commandCalls returns how many times srv has run each of the commands
// (lower case, such as "evalsha"), summed, from INFO commandstats.
func commandCalls(t *testing.T, srv *redistest.Server, cmds ...string) int {
	t.Helper()
	info := srv.Do(t, "INFO", "commandstats")
	total := 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, c := range cmds {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+c+":calls=")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatalf("parsing %q: %v", line, err)
			}
			total += n
		}
	}
	return total
}

// infoField returns the value of field in the INFO section of srv, or "".
func infoField(t *testing.T, srv *redistest.Server, section, field string) string {
	t.Helper()
	for _, line := range strings.Split(srv.Do(t, "INFO", section), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// eventually polls cond every few milliseconds until it holds, and fails t
// with what() if it does not within limit.
func eventually(t *testing.T, limit time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dumpGoroutines writes every goroutine's stack to stderr, to find a leak.
func dumpGoroutines() { pprof.Lookup("goroutine").WriteTo(os.Stderr, 1) }

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// wantGathered fails t unless exactly limit of the decisions were
// admitted, in fewer than half as many script calls as decisions.
func wantGathered(t *testing.T, admitted, limit, decisions, calls int) {
	t.Helper()
	if admitted != limit {
		t.Errorf("admitted %d of %d, want exactly the limit %d", admitted, decisions, limit)
	}
	if calls >= decisions/2 {
		t.Errorf("%d decisions took %d script calls, want them gathered into fewer than half as many", decisions, calls)
	} else {
		t.Logf("%d decisions in %d script calls", decisions, calls)
	}
}
