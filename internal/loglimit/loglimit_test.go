package loglimit

import (
	"testing"
	"time"
)

func TestLimit(t *testing.T) {
	l := &Limit{Per: 3}
	t0 := time.Unix(1000, 0)
	got := 0
	for range 10 {
		if l.Allow(t0) {
			got++
		}
	}
	if got != 3 {
		t.Errorf("one second: %d lines admitted, want 3", got)
	}
	if !l.Allow(t0.Add(time.Second)) {
		t.Error("the next second admits lines again")
	}
	var none Limit
	if none.Allow(t0) || (&Limit{Per: -1}).Allow(t0) {
		t.Error("a Limit of 0 or less admits nothing")
	}
}
