package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/luascript"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkRedis measures decisions per second against one local
// redis-server, side by side in one run: Sluice's Redis store at 1, 64 and
// 1,024 concurrent callers; go-redis/redis_rate (GCRA), the peer, likewise;
// and redis-benchmark -P 16 sending Sluice's own script with the same
// arguments, the ceiling of this machine. Sluice runs with its defaults,
// which gather concurrent decisions into shared script calls, and with one
// script call per decision, as the ceiling makes. The ceiling keeps 1,024 calls in
// flight (64 connections, 16 pipelined on each); 1,024 callers keep as many,
// 64 callers a sixteenth of that. Keys are picked at random among 100,000 and
// every decision admits and writes. The rate is 100,000 per second per key:
// at much higher rates redis_rate's floating-point state stops changing
// (tat + 1e-9 rounds back to tat) and it skips its write, which would make
// it look faster than it is.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}

	// sluiceWith returns the decision function of a Sluice Redis store
	// with the given connections, flush delay and coalescing (zero: the
	// defaults).
	sluiceWith := func(conns int, flush time.Duration, coalesce int) func(string) bool {
		store, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr, Timeout: 5 * time.Second, DenyCache: -1,
			Connections: conns, FlushDelay: flush, Coalesce: coalesce})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		lim, err := sluice.New(store, "bench", sluice.Limit{Algorithm: sluice.GCRA, Count: redisRate, Period: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) bool {
			d, err := lim.Allow(ctx, key)
			if err != nil || d.Degraded {
				b.Fatalf("sluice: %+v %v", d, err)
			}
			return d.Allowed
		}
	}

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128})
	defer rdb.Close()
	rl := redis_rate.NewLimiter(rdb)
	peerAllow := func(key string) bool {
		res, err := rl.Allow(ctx, key, redis_rate.PerSecond(redisRate))
		if err != nil {
			b.Fatalf("redis_rate: %v", err)
		}
		return res.Allowed > 0
	}

	for _, callers := range []int{1, 64, 1024} {
		for _, l := range []struct {
			name  string
			allow func(string) bool
		}{
			{"sluice", sluiceWith(0, 0, 0)},                      // the defaults: 2 connections, 20µs, up to 32 takes per call
			{"sluice-nocoalesce", sluiceWith(0, 0, 1)},           // one script call per decision, as the ceiling makes
			{"sluice-4conns-noflushdelay", sluiceWith(4, -1, 1)}, // rueidis's own defaults, one call per decision
			{"redis_rate", peerAllow},
		} {
			b.Run(fmt.Sprintf("callers=%d/limiter=%s", callers, l.name), func(b *testing.B) {
				for _, k := range keys[:1000] {
					l.allow(k) // warm connections and scripts
				}
				var seq atomic.Uint64
				// RunParallel starts parallelism × GOMAXPROCS goroutines.
				b.SetParallelism(max(callers/runtime.GOMAXPROCS(0), 1))
				before := readCPU(b, srv, syscall.RUSAGE_SELF)
				b.ResetTimer()
				start := time.Now()
				if callers == 1 {
					for i := range b.N {
						l.allow(keys[i%len(keys)])
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						rng := rand.New(rand.NewPCG(seq.Add(1), 1))
						for pb.Next() {
							l.allow(keys[rng.IntN(len(keys))])
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
				b.StopTimer()
				readCPU(b, srv, syscall.RUSAGE_SELF).report(b, before, b.N)
			})
		}
	}

	b.Run("ceiling=redis-benchmark-P16", func(b *testing.B) {
		rps := redisBenchmark(b, srv)
		b.ReportMetric(rps, "decisions/s")
		b.ReportMetric(1e9/rps, "ns/op")
	})
}

// cpuUse is CPU time used so far: by the client, this process or its
// waited-for children, and by the Redis server under test; and how many
// reads the server has done from its clients' sockets.
type cpuUse struct {
	client, server time.Duration
	reads, calls   int64
}

// readCPU reads the client's CPU time (who is syscall.RUSAGE_SELF or
// RUSAGE_CHILDREN) and the server's, from INFO cpu.
func readCPU(b *testing.B, srv *redistest.Server, who int) cpuUse {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	u := cpuUse{client: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	for _, m := range cpuLine.FindAllStringSubmatch(srv.Do(b, "INFO", "cpu"), -1) {
		sec, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			b.Fatalf("INFO cpu: %v", err)
		}
		u.server += time.Duration(sec * 1e9)
	}
	m := readsLine.FindStringSubmatch(srv.Do(b, "INFO", "stats"))
	if m == nil {
		b.Fatal("INFO stats has no total_reads_processed")
	}
	u.reads, _ = strconv.ParseInt(m[1], 10, 64)
	if m := callsLine.FindStringSubmatch(srv.Do(b, "INFO", "commandstats")); m != nil {
		u.calls, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return u
}

// callsLine matches the number of EVALSHA calls the server has run.
var callsLine = regexp.MustCompile(`(?m)^cmdstat_evalsha:calls=([0-9]+)`)

// readsLine matches the number of socket reads the server has processed.
var readsLine = regexp.MustCompile(`(?m)^total_reads_processed:([0-9]+)`)

// cpuLine matches the server's own user and system CPU in INFO cpu (not its
// children's).
var cpuLine = regexp.MustCompile(`(?m)^used_cpu_(?:user|sys):([0-9.]+)`)

// report reports the client's and the server's CPU per decision since
// before, over n decisions, how many decisions the server read per socket
// read, and how many each script call decided. On this project's two-core machines the client and the
// server share the CPUs, so the client's CPU per decision bounds how much is
// left for the server: a steadier figure than decisions/s when the host is
// noisy. Decisions per read is how well the client batches its writes: each
// read costs the server a wakeup and a system call, and a write costs the
// client one.
func (u cpuUse) report(b *testing.B, before cpuUse, n int) {
	b.ReportMetric(float64(u.client-before.client)/1e3/float64(n), "client-µs/op")
	b.ReportMetric(float64(u.server-before.server)/1e3/float64(n), "server-µs/op")
	if reads := u.reads - before.reads; reads > 0 {
		b.ReportMetric(float64(n)/float64(reads), "ops/read")
	}
	if calls := u.calls - before.calls; calls > 0 {
		b.ReportMetric(float64(n)/float64(calls), "ops/call")
	}
}

// redisRate is the limit of every benchmark here, per key per second.
const redisRate = 100_000

var rpsLine = regexp.MustCompile(`([0-9.]+) requests per second`)

// redisBenchmark runs redis-benchmark with 64 connections pipelining 16
// commands each, sending EVALSHA of the script the store sends for the GCRA
// limit above (plain.lua: its numbers stay below 2^52), with the same
// arguments, on random keys: GCRA, 100000 per 1000000µs, burst 100000, rate
// reduced to 1 unit per 10µs, plain arithmetic, and the definition the
// state records.
func redisBenchmark(b *testing.B, srv *redistest.Server) float64 {
	// The store assembles the script from its pieces the same way.
	src, err := luascript.Assemble(os.DirFS("../redisstore"), "plain.lua", "")
	if err != nil {
		b.Fatal(err)
	}
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	srv.Do(b, "SCRIPT", "LOAD", src)
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark not installed")
	}
	const requests = 400_000
	key := "sluice:{5:bench:__rand_int__}:0"
	call := []string{"EVALSHA", sha, "2", key, key + ":m", "take", "1", "", "0", "1", "2", "100000", "1000000", "100000", "1", "10", "0", "2:100000:1000000:100000;"}
	// One call by hand first, so that a mistake in the arguments shows as
	// the script's own error message.
	srv.Do(b, call...)
	srv.Do(b, "CONFIG", "RESETSTAT")
	before := readCPU(b, srv, syscall.RUSAGE_CHILDREN)
	args := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port), "-P", "16", "-c", "64", "-n", strconv.Itoa(requests), "-r", "100000", "-q"}, call...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	m := rpsLine.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		b.Fatalf("redis-benchmark printed no rate:\n%s", out)
	}
	rps, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	readCPU(b, srv, syscall.RUSAGE_CHILDREN).report(b, before, requests)
	if reply := srv.Do(b, "INFO", "errorstats"); len(reply) > 0 && regexp.MustCompile(`errorstat_`).MatchString(reply) {
		b.Fatalf("redis-benchmark's script calls failed: %s", reply)
	}
	return rps
}
