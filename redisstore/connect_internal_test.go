package redisstore

import (
	"testing"
	"time"
)

// With ConnectLater, the background attempts to connect double from 100ms
// and then come about every second (0.75 to 1.25s) for as long as Redis is
// away: never the 5s of an earlier back-off.
func TestConnectSchedule(t *testing.T) {
	for _, j := range []float64{0, 0.5, 0.999999} {
		wait, total := 100*time.Millisecond, 100*time.Millisecond
		var waits []time.Duration
		for range 100 {
			wait = nextConnect(wait, j)
			waits = append(waits, wait)
			total += wait
			if wait > 1250*time.Millisecond {
				t.Fatalf("jitter %v: waits %v: %v exceeds 1.25s", j, waits, wait)
			}
		}
		if wait < 750*time.Millisecond {
			t.Errorf("jitter %v: settled at %v, want 0.75s to 1.25s", j, wait)
		}
		if want := 100 * 1250 * time.Millisecond; total > want {
			t.Errorf("jitter %v: 100 attempts took %v, want at most %v", j, total, want)
		}
	}
}
