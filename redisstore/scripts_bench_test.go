package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkScripts runs each of the store's script paths, one call at a
// time, against a redis-server of its own: a decision of each algorithm
// in plain arithmetic (plain.lua), of two limits at once, a peek, a
// reservation and its refund, eight takes in one call (as the coalescer
// sends them), a rule in big numbers (sluice.lua), a policy with a
// penalty (penalty.lua around plain.lua), a concurrency lease (lease.lua)
// and a take with a lease (leasetake.lua). No limit is ever reached, so
// every take writes. Besides the time of the whole round trip (ns/op) it
// reports Redis's own time running the script (script-ns/op, from INFO
// commandstats), which the network and the client leave out, and the CPU
// time of Redis's main thread per call (server-cpu-ns/op, from INFO cpu:
// the script and the reading and writing of its call), which, unlike
// either time, does not grow while other processes hold the machine's
// CPUs.
func BenchmarkScripts(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second, DenyCache: -1, Coalesce: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const huge = 1_000_000_000 // per second: never reached
	policyOf := func(name string, limits ...sluice.Limit) *sluice.Policy {
		p, err := sluice.NewPolicy(name, limits...)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	take := func(p *sluice.Policy) func() error {
		return func() error {
			d, err := s.Take(ctx, p, "k", 1)
			if err == nil && !d.Allowed {
				b.Fatalf("%s: denied: %+v", p.Name(), d)
			}
			return err
		}
	}
	gcra := policyOf("gcra", sluice.Limit{Algorithm: sluice.GCRA, Count: huge, Period: time.Second})
	penalized, err := policyOf("penalty", sluice.Limit{Algorithm: sluice.GCRA, Count: huge, Period: time.Second}).
		WithPenalty(sluice.Penalty{Blocks: []time.Duration{time.Minute}, Forget: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	wide := policyOf("wide", sluice.Limit{Algorithm: sluice.TokenBucket, Count: 999999937, Period: time.Second})
	if !redisstore.Wide(s, wide) || redisstore.Wide(s, gcra) {
		b.Fatal("the policies are not decided by the scripts their names say")
	}
	each := make([][]sluice.Request, 8)
	for i := range each {
		each[i] = []sluice.Request{{Policy: gcra, Key: "each" + strconv.Itoa(i), N: 1}}
	}
	cases := []struct {
		name string
		op   func() error
	}{
		{"plain/gcra", take(gcra)},
		{"plain/token_bucket", take(policyOf("tb", sluice.Limit{Algorithm: sluice.TokenBucket, Count: huge, Period: time.Second}))},
		{"plain/fixed_window", take(policyOf("fw", sluice.Limit{Algorithm: sluice.FixedWindow, Count: huge, Period: time.Second}))},
		{"plain/sliding_window", take(policyOf("sw", sluice.Limit{Algorithm: sluice.SlidingWindow, Count: huge, Period: time.Second}))},
		{"plain/sliding_log", take(policyOf("sl", sluice.Limit{Algorithm: sluice.SlidingLog, Count: 100_000, Period: 10 * time.Millisecond}))},
		{"plain/two_limits", take(policyOf("two",
			sluice.Limit{Algorithm: sluice.GCRA, Count: huge, Period: time.Second},
			sluice.Limit{Algorithm: sluice.FixedWindow, Count: huge, Period: time.Minute}))},
		{"plain/peek", func() error { _, err := s.Peek(ctx, gcra, "k"); return err }},
		{"plain/reserve_cancel", func() error {
			// A reservation of two, and the refund of one of them as if it
			// were due in an hour: the refund writes the debt left.
			if _, err := s.Reserve(ctx, gcra, "r", 2, 0); err != nil {
				return err
			}
			return s.Cancel(ctx, gcra, "r", 1, time.Now().Add(time.Hour))
		}},
		{"plain/each8", func() error { _, err := redisstore.Each(s, each); return err }},
		{"wide/token_bucket", take(wide)},
		{"penalty/gcra", take(penalized)},
		{"lease/acquire_release", func() error {
			if _, err := s.Acquire(ctx, "c", "k", "id", 10, time.Minute); err != nil {
				return err
			}
			_, err := s.Release(ctx, "c", "k", "id")
			return err
		}},
		{"leasetake/gcra", func() error {
			if _, _, err := s.AcquireTake(ctx, gcra, 1, "gcra", "k", "id", 10, time.Minute); err != nil {
				return err
			}
			_, err := s.Release(ctx, "gcra", "k", "id")
			return err
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range 100 { // load the scripts, write the keys
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
			}
			calls, usec := scriptTime(b, srv)
			cpu := serverCPU(b, srv)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			calls2, usec2 := scriptTime(b, srv)
			cpu2 := serverCPU(b, srv)
			if calls2 == calls {
				b.Fatal("no script ran")
			}
			b.ReportMetric(float64(usec2-usec)*1000/float64(b.N), "script-ns/op")
			b.ReportMetric(float64(cpu2-cpu)/float64(b.N), "server-cpu-ns/op")
		})
	}
}

// scriptTime returns how many script calls (EVALSHA and EVAL) srv has run
// and the µs it spent in them, from INFO commandstats.
func scriptTime(tb testing.TB, srv *redistest.Server) (calls, usec int64) {
	tb.Helper()
	for _, line := range strings.Split(srv.Do(tb, "INFO", "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range []string{"evalsha", "eval"} {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for _, field := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(field, "=")
				n, err := strconv.ParseInt(v, 10, 64)
				switch {
				case k != "calls" && k != "usec":
				case err != nil:
					tb.Fatalf("parsing %q: %v", line, err)
				case k == "calls":
					calls += n
				default:
					usec += n
				}
			}
		}
	}
	return calls, usec
}

// serverCPU returns the CPU time, user and system, that srv's main thread
// (which runs every script) has used, in ns, from INFO cpu.
func serverCPU(tb testing.TB, srv *redistest.Server) int64 {
	tb.Helper()
	var ns int64
	found := 0
	for _, line := range strings.Split(srv.Do(tb, "INFO", "cpu"), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k != "used_cpu_user_main_thread" && k != "used_cpu_sys_main_thread" {
			continue
		}
		sec, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tb.Fatalf("INFO cpu: %q: %v", line, err)
		}
		ns += int64(sec * 1e9)
		found++
	}
	if found != 2 {
		tb.Fatal("INFO cpu has no used_cpu_user_main_thread and used_cpu_sys_main_thread")
	}
	return ns
}
