package storekit_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/storekit"
)

func TestPenaltyStrike(t *testing.T) {
	pen := sluice.Penalty{After: 2, Blocks: []time.Duration{time.Minute, time.Hour}, Forget: 10 * time.Minute}
	var ps storekit.PenaltyState
	ps, off := storekit.Strike(&pen, ps, 0)
	if off || ps.Strikes != 1 {
		t.Fatalf("first strike: %+v, offence %v", ps, off)
	}
	ps, off = storekit.Strike(&pen, ps, int64(time.Second))
	if !off || ps.Offences != 1 || ps.Strikes != 0 || ps.Until != int64(time.Second+time.Minute) {
		t.Fatalf("second strike: %+v, offence %v", ps, off)
	}
	if r, ok := ps.Blocked(int64(time.Minute)); !ok || r != time.Second {
		t.Fatalf("Blocked at 1m = %v, %v; want 1s, true", r, ok)
	}
	// Quiet from the block's end (1m1s) for 10 minutes: forgotten.
	ps, _ = storekit.Strike(&pen, ps, int64(time.Second+11*time.Minute))
	if ps.Offences != 0 || ps.Strikes != 1 {
		t.Fatalf("after the quiet period: %+v, want a fresh record with one strike", ps)
	}
	if storekit.Block(&pen, 5) != time.Hour || storekit.Block(&pen, 1) != time.Minute {
		t.Errorf("Block(5), Block(1) = %v, %v", storekit.Block(&pen, 5), storekit.Block(&pen, 1))
	}
}
