package replay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// TestSuggest: client i of 1,000 sends ⌈i/10⌉ requests within one second
// to the sl rule (10 a minute), so that ten clients each have the peaks 1
// to 100, and the percentiles and the limits that limit a share of them
// are known.
func TestSuggest(t *testing.T) {
	var hs []hit
	for i := 1; i <= 1000; i++ {
		for range (i + 9) / 10 {
			hs = append(hs, hit{at: t0, client: fmt.Sprintf("10.%d.%d.1", i/256, i%256), method: "GET", target: "/sl/x"})
		}
	}
	cfg := loadTestConfig(t, "testdata/known.yaml")
	r, err := newRun(Options{Config: cfg, Logs: []string{"-"}, Stdin: bytes.NewReader(writeLog(t, Combined, hs)), Suggest: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.do(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rules[0].Suggest != nil {
		t.Errorf("a rule without requests has a suggestion: %+v", rep.Rules[0].Suggest)
	}
	st := r.cur.st
	sl := st.byName["sl"]
	for _, tt := range []struct {
		share            float64
		limit, overLimit int64
	}{
		{share: 0.001, limit: 100, overLimit: 0}, // the default, as Run computed it: 99 would limit 10
		{share: 0.01, limit: 99, overLimit: 10},
		{share: 0.5, limit: 50, overLimit: 500},
		{share: 1, limit: 0, overLimit: 1000},
	} {
		s := rep.Rules[2].Suggest
		if tt.share != 0.001 {
			s = suggest(st, sl, st.clientsOf(sl), tt.share)
		}
		if s == nil {
			t.Fatal("no suggestion for sl")
		}
		want := Suggestion{PeriodSeconds: 60, Clients: 1000, P50: 50, P90: 90, P99: 99, P999: 100, Max: 100,
			MaxClientsLimited: tt.share, Limit: tt.limit, ClientsOverLimit: tt.overLimit, CurrentLimit: 10, ClientsOverCurrent: 900}
		if *s != want {
			t.Errorf("share %v: got %+v, want %+v", tt.share, *s, want)
		}
	}
}

// TestPeakCounter holds the peak over a period, counted in tenths, to the
// most requests in any window of one period, for requests at the starts
// of tenths.
func TestPeakCounter(t *testing.T) {
	sec := int64(time.Second)
	for _, tt := range []struct {
		name string
		at   []int64 // seconds; period 60s
		want uint32
	}{
		{"one", []int64{0}, 1},
		{"across a boundary", []int64{0, 0, 54, 54}, 4},
		{"a period apart", []int64{0, 0, 60, 60}, 2},
		{"sliding", []int64{0, 6, 12, 18, 24, 30, 36, 42, 48, 54, 60, 66}, 10},
		{"after a gap", []int64{0, 1000, 1000, 1000}, 3},
	} {
		p := newPeakCounter(time.Minute)
		for _, s := range tt.at {
			p.add(s * sec)
		}
		if p.peak != tt.want {
			t.Errorf("%s: peak %d, want %d", tt.name, p.peak, tt.want)
		}
	}
}

// TestAgainst compares known.yaml with a copy whose api rule allows 1,000
// a second: the bursty client and the scraper are limited by the one and
// not the other.
func TestAgainst(t *testing.T) {
	data, err := os.ReadFile("testdata/known.yaml")
	if err != nil {
		t.Fatal(err)
	}
	loose := strings.Replace(string(data), "limit: 20\n    period: 10s\n    burst: 40", "limit: 1000\n    period: 1s", 1)
	if loose == string(data) {
		t.Fatal("the api rule was not changed")
	}
	path := filepath.Join(t.TempDir(), "loose.yaml")
	if err := os.WriteFile(path, []byte(loose), 0o600); err != nil {
		t.Fatal(err)
	}
	looseCfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	known := loadTestConfig(t, "testdata/known.yaml")
	log := writeLog(t, Combined, knownTraffic())
	run := func(cur, old *config.Config) *Comparison {
		rep, err := Run(context.Background(), Options{Config: cur, Against: old, AgainstName: "old.yaml", Logs: []string{"-"}, Stdin: bytes.NewReader(log)})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Against
	}
	names := func(cs []ClientCount) string {
		var s []string
		for _, c := range cs {
			s = append(s, fmt.Sprintf("%s:%d", c.Client, c.Limited))
		}
		return strings.Join(s, " ")
	}
	c := run(known, looseCfg)
	if got, want := names(c.NewlyLimited), "192.0.2.30:862 192.0.2.20:70"; got != want || c.NewlyLimitedCount != 2 || len(c.NoLongerLimited) != 0 {
		t.Errorf("newly limited %q (%d), no longer %q; want %q, none", got, c.NewlyLimitedCount, names(c.NoLongerLimited), want)
	}
	for _, rc := range c.Rules {
		wantNew := int64(0)
		if rc.Rule == "api" {
			wantNew = 2
		}
		if rc.In != "both" || rc.NewlyLimitedCount != wantNew || rc.NoLongerLimitedCount != 0 {
			t.Errorf("rule %+v: want in both, %d newly limited, none no longer", rc, wantNew)
		}
	}
	c = run(looseCfg, known)
	if got, want := names(c.NoLongerLimited), "192.0.2.30:862 192.0.2.20:70"; got != want || len(c.NewlyLimited) != 0 {
		t.Errorf("reversed: no longer limited %q, newly %q; want %q, none", got, names(c.NewlyLimited), want)
	}
	if c.Rules[0].NoLongerLimited[0].Client != "ip=192.0.2.30/32" {
		t.Errorf("reversed: api's keys %+v", c.Rules[0].NoLongerLimited)
	}
}
