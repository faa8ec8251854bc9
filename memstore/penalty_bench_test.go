package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkPenalty measures the decision of a penalized GCRA policy on one
// hot key, beside the same policy without a penalty, in one binary:
//
//   - none: no penalty, the limit admits every request;
//   - admit: a penalty, the limit admits every request (the cost of the
//     penalty's check on the ordinary decision);
//   - blocked: a penalty, the key blocked for an hour (every request
//     answered from the block).
//
// The ordinary decision's cost before and after penalties existed is
// measured by bench/abuse/run.sh, which runs BenchmarkAllow of an earlier
// commit beside this one.
func BenchmarkPenalty(b *testing.B) {
	pen := sluice.Penalty{After: 1, Blocks: []time.Duration{time.Hour}, Forget: 24 * time.Hour}
	for _, bc := range []struct {
		name    string
		penalty bool
		count   int64
	}{
		{"none", false, 1_000_000_000},
		{"admit", true, 1_000_000_000},
		{"blocked", true, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			defer s.Close()
			p, err := sluice.NewPolicy("bench-penalty-"+bc.name, lim(sluice.GCRA, bc.count, time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			if bc.penalty {
				if p, err = p.WithPenalty(pen); err != nil {
					b.Fatal(err)
				}
			}
			l, err := sluice.NewWithPolicy(s, p)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			const key = "client-1"
			l.Allow(ctx, key)
			d, err := l.Allow(ctx, key) // the second request blocks the key when count is 1
			if err != nil {
				b.Fatal(err)
			}
			if want := bc.name != "blocked"; d.Allowed != want {
				b.Fatalf("%s: second request allowed %v, want %v", bc.name, d.Allowed, want)
			}
			b.ReportAllocs()
			for b.Loop() {
				l.Allow(ctx, key)
			}
		})
	}
}
