package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Without ConnectLater, New refuses an unreachable Redis. With it, New
// succeeds, every decision follows OnError (here the local fallback, which
// still enforces the limit) with ErrNotConnected, and once Redis is up the
// store connects by itself and decides there, and OnStateChange hears of
// it.
func TestConnectLater(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	url := srv.URL()
	if s, err := redisstore.New(redisstore.Options{URL: url}); err == nil {
		s.Close()
		t.Fatalf("New with Redis down: got a store, want an error")
	}
	var fails failures
	var tr transitions
	store := open(t, redisstore.Options{URL: url, ConnectLater: true, Timeout: slow, OnFailure: fails.record, OnStateChange: tr.record})
	if !store.Degraded() {
		t.Errorf("Degraded before connecting: false, want true")
	}
	if err := store.Ping(context.Background()); !errors.Is(err, redisstore.ErrNotConnected) {
		t.Errorf("Ping before connecting: %v, want ErrNotConnected", err)
	}
	lim := limiter(t, store, "later", hourly)
	for i := range 4 {
		d := allow(t, lim, "k")
		if want := i < 3; d.Allowed != want || !d.Degraded {
			t.Errorf("decision %d before connecting: Allowed=%v Degraded=%v, want %v and true (the local fallback's limit of 3)", i, d.Allowed, d.Degraded, want)
		}
	}
	for _, err := range fails.list() {
		if !errors.Is(err, redisstore.ErrNotConnected) {
			t.Errorf("OnFailure(%v): want ErrNotConnected", err)
		}
	}
	srv.Restart(t)
	eventually(t, 10*time.Second, func() bool { return !allow(t, lim, "after").Degraded },
		func() string { return "decisions still degraded with Redis up" })
	if store.Degraded() {
		t.Errorf("Degraded after connecting: true, want false")
	}
	// The store started degraded without a call; connecting left it.
	if got, want := tr.list(), []string{"false (error set: false)"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OnStateChange calls: got %v, want %v", got, want)
	}
	if err := store.Ping(context.Background()); err != nil {
		t.Errorf("Ping after connecting: %v", err)
	}
}

// A store that never connects closes promptly and leaves no goroutine
// behind.
func TestConnectLaterClose(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	before := runtime.NumGoroutine()
	s, err := redisstore.New(redisstore.Options{URL: srv.URL(), ConnectLater: true})
	if err != nil {
		t.Fatal(err)
	}
	if took := timed(func() { s.Close() }); took > 6*time.Second {
		t.Errorf("Close took %v", took)
	}
	eventually(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= before },
		func() string {
			return fmt.Sprintf("goroutines: %d after Close, %d before New", runtime.NumGoroutine(), before)
		})
}
