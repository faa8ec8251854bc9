package sluice_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/calendar"
)

func TestPolicySync(t *testing.T) {
	p, err := sluice.NewPolicy("s", sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Sync(); got != (sluice.Sync{}) {
		t.Errorf("a new policy's sync: %+v, want exact", got)
	}
	a, err := p.WithSync(sluice.Sync{Mode: sluice.SyncAsync})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Sync(); got.Mode != sluice.SyncAsync || got.Interval != sluice.DefaultSyncInterval {
		t.Errorf("async without an interval: %+v, want the default interval", got)
	}
	if p.Sync() != (sluice.Sync{}) || a.Name() != p.Name() {
		t.Errorf("WithSync changed the original or the name")
	}
	l, err := p.WithSync(sluice.Sync{Mode: sluice.SyncLease, Interval: time.Second})
	if err != nil || l.Sync() != (sluice.Sync{Mode: sluice.SyncLease}) {
		t.Errorf("lease: %+v, %v; want the interval dropped", l.Sync(), err)
	}
	pen := sluice.Penalty{Blocks: []time.Duration{time.Minute}, Forget: time.Hour}
	if _, err := l.WithPenalty(pen); !errors.Is(err, sluice.ErrInvalidPenalty) {
		t.Errorf("a penalty on a leased policy: %v, want ErrInvalidPenalty", err)
	}
	pp, err := p.WithPenalty(pen)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pp.WithSync(sluice.Sync{Mode: sluice.SyncLease}); !errors.Is(err, sluice.ErrInvalidSync) {
		t.Errorf("lease on a penalized policy: %v, want ErrInvalidSync", err)
	}
	two, err := sluice.NewPolicy("two", sluice.Limit{Algorithm: sluice.GCRA, Count: 10, Period: time.Second}, sluice.Limit{Algorithm: sluice.GCRA, Count: 100, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := two.WithSync(sluice.Sync{Mode: sluice.SyncLease}); !errors.Is(err, sluice.ErrInvalidSync) {
		t.Errorf("lease on a policy of two limits: %v, want ErrInvalidSync", err)
	}
	if _, err := p.WithSync(sluice.Sync{Mode: 9}); !errors.Is(err, sluice.ErrInvalidSync) {
		t.Errorf("unknown mode: %v", err)
	}
	for _, m := range []sluice.SyncMode{sluice.SyncExact, sluice.SyncLease, sluice.SyncAsync} {
		if got, err := sluice.ParseSyncMode(m.String()); err != nil || got != m {
			t.Errorf("ParseSyncMode(%q) = %v, %v", m, got, err)
		}
	}
}

// A calendar quota's windows are the calendar's: lease and async modes,
// which reason about the store's windows, refuse it.
func TestSyncRefusesCalendarQuota(t *testing.T) {
	c, err := calendar.Parse("month")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sluice.NewPolicy("monthly", sluice.Limit{Algorithm: sluice.FixedWindow, Count: 10000, Calendar: c})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []sluice.SyncMode{sluice.SyncLease, sluice.SyncAsync} {
		if _, err := p.WithSync(sluice.Sync{Mode: m}); !errors.Is(err, sluice.ErrInvalidSync) {
			t.Errorf("sync %s on a monthly quota: %v, want ErrInvalidSync", m, err)
		}
	}
	if _, err := p.WithSync(sluice.Sync{}); err != nil {
		t.Errorf("exact sync on a monthly quota: %v", err)
	}
}
