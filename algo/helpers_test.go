package algo_test

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

// t0 is a realistic time, in nanoseconds since the Unix epoch, at which the
// tests start. It is a multiple of every period the exact-time tables use
// (1s, 1m, 1h, 1 day), so that windows aligned to the epoch start at t0.
const t0 = int64(1_700_006_400) * int64(time.Second)

func init() {
	// Guard the claim above, on which the window tables depend.
	for _, p := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		if t0%int64(p) != 0 {
			panic("t0 is not a multiple of " + p.String())
		}
	}
}

func mustCompile(t testing.TB, alg algo.Algorithm, count int64, period time.Duration, burst int64) algo.Rule {
	t.Helper()
	r, err := algo.Compile(alg, count, period, burst)
	if err != nil {
		t.Fatalf("Compile(%v, %d, %v, %d): %v", alg, count, period, burst, err)
	}
	return r
}

// key is the state of one key under one rule of any algorithm, driven the way
// a store drives it: Eval and keep the returned state, or EvalLog and then
// Record when admitted.
type key struct {
	r  *algo.Rule
	st algo.State
	lg algo.Log
	// rec mirrors the entries lg holds, as Record documents them (merged
	// when not after the newest; those at or before now−Period dropped), so
	// that peek can evaluate a copy of the log.
	rec []logEntry
}

type logEntry struct{ at, n int64 }

func newKey(r *algo.Rule) *key { return &key{r: r} }

// take decides a request of cost n at now and charges it if admitted.
func (k *key) take(now, n int64) algo.Status {
	if k.r.Algorithm() != algo.SlidingLog {
		next, s := k.r.Eval(k.st, now, n)
		k.st = next
		return s
	}
	s := k.r.EvalLog(&k.lg, now, n)
	if s.Allowed && n > 0 {
		k.r.Record(&k.lg, now, n)
		for len(k.rec) > 0 && k.rec[0].at <= now-int64(k.r.Period()) {
			k.rec = k.rec[1:]
		}
		if last := len(k.rec) - 1; last >= 0 && k.rec[last].at >= now {
			k.rec[last].n += n
		} else {
			k.rec = append(k.rec, logEntry{now, n})
		}
	}
	if k.lg.Len() != len(k.rec) {
		panic(fmt.Sprintf("the log holds %d entries, the test's mirror of it %d", k.lg.Len(), len(k.rec)))
	}
	return s
}

// peek decides a request of cost n at now and changes nothing.
func (k *key) peek(now, n int64) algo.Status {
	if k.r.Algorithm() != algo.SlidingLog {
		_, s := k.r.Eval(k.st, now, n)
		return s
	}
	var lg algo.Log
	for _, e := range k.rec {
		k.r.Record(&lg, e.at, e.n)
	}
	return k.r.EvalLog(&lg, now, n)
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0, computed with math/big so
// that tables can state their expected values as the exact formulas.
func ceilDiv(a, b int64) int64 {
	q, m := new(big.Int).DivMod(big.NewInt(a), big.NewInt(b), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
