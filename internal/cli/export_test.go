package cli

import (
	"testing"
	"time"
)

// PollByHand makes every serve that starts until t ends check its files
// for a change only when the test calls the returned function, instead of
// every second. The function returns once a serve has made a whole check
// (and any reload it led to): it sends two ticks, and the reload loop takes
// the second only after it has done with the first. Tests that use it must
// not run in parallel, and must run one serve at a time.
func PollByHand(t *testing.T) (poll func()) {
	t.Helper()
	ticks := make(chan time.Time)
	old := pollTicks
	pollTicks = func() (<-chan time.Time, func()) { return ticks, func() {} }
	t.Cleanup(func() { pollTicks = old })
	return func() {
		t.Helper()
		for range 2 {
			select {
			case ticks <- time.Now():
			case <-time.After(30 * time.Second): // a safeguard against a hang
				t.Fatal("no serve is looking for changes of its files")
			}
		}
	}
}
