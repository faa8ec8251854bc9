package sluice_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestPenaltyValidate(t *testing.T) {
	p, err := sluice.NewPolicy("login", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 5, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m := time.Minute
	for _, c := range []struct {
		pen  sluice.Penalty
		want string // in the error; empty for valid
	}{
		{sluice.Penalty{Blocks: []time.Duration{m}, Forget: time.Hour}, ""},
		{sluice.Penalty{After: 3, Blocks: []time.Duration{m, 10 * m, time.Hour}, Forget: 24 * time.Hour}, ""},
		{sluice.Penalty{After: -1, Blocks: []time.Duration{m}, Forget: m}, "after -1"},
		{sluice.Penalty{After: 2_000_000, Blocks: []time.Duration{m}, Forget: m}, "after 2000000"},
		{sluice.Penalty{Forget: m}, "0 blocks"},
		{sluice.Penalty{Blocks: make([]time.Duration, 9), Forget: m}, "9 blocks"},
		{sluice.Penalty{Blocks: []time.Duration{m, 0}, Forget: m}, "block 1 is 0s"},
		{sluice.Penalty{Blocks: []time.Duration{-m}, Forget: m}, "block 0 is -1m0s"},
		{sluice.Penalty{Blocks: []time.Duration{400 * 24 * time.Hour}, Forget: m}, "block 0 is 9600h"},
		{sluice.Penalty{Blocks: []time.Duration{m}}, "forget is 0s"},
	} {
		q, err := p.WithPenalty(c.pen)
		if c.want == "" {
			if err != nil {
				t.Errorf("WithPenalty(%+v): %v", c.pen, err)
				continue
			}
			got, ok := q.Penalty()
			if !ok || got.After != c.pen.After || len(got.Blocks) != len(c.pen.Blocks) || q.Name() != p.Name() || q.Len() != p.Len() {
				t.Errorf("WithPenalty(%+v) = %+v, %v", c.pen, got, ok)
			}
			if _, ok := p.Penalty(); ok {
				t.Errorf("WithPenalty changed the original policy")
			}
			continue
		}
		if !errors.Is(err, sluice.ErrInvalidPenalty) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"login"`) {
			t.Errorf("WithPenalty(%+v) = %v, want ErrInvalidPenalty naming %q and the policy", c.pen, err, c.want)
		}
	}
}
