package adaptive

import (
	"context"
	"testing"
)

// BenchmarkAcquireRelease is the cost a request pays to the limiter: one
// Acquire and one Release, under a limit that never binds.
func BenchmarkAcquireRelease(b *testing.B) {
	l, err := New(Options{MaxLimit: MaxLimit, InitialLimit: MaxLimit})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, a, err := l.Acquire(ctx, Default)
			if err != nil || !a.Admitted {
				b.Fatal("refused")
			}
			s.Release(ctx, Succeeded)
		}
	})
}
