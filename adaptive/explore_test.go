package adaptive

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func explore(t *testing.T, o Options, rate float64, change func(p *pool), mix func(i int) Class) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(10, 50*time.Millisecond, 0.2)
		l, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		h := Middleware(l, MiddlewareOptions{Class: classOf})(p)
		var tr trace
		stop := make(chan struct{})
		go tr.run(l, 100*time.Millisecond, stop)
		go func() {
			time.Sleep(10 * time.Second)
			change(p)
		}()
		var ld load
		t0 := time.Now()
		ld.run(h, func(time.Duration) float64 { return rate }, mix, 20*time.Second)
		close(stop)
		for i := range tr.at {
			if i%10 == 0 || (tr.at[i] > 9900*time.Millisecond && tr.at[i] < 12*time.Second) {
				s := tr.stats[i]
				fmt.Printf("%5.1fs limit %3d inflight %3d queued %3d noload %v lat %v probing %v\n", tr.at[i].Seconds(), s.Limit, s.InFlight, s.Queued, s.NoLoadLatency.Round(time.Millisecond), s.Latency.Round(time.Millisecond), s.Probing)
			}
		}
		for _, ph := range [][2]time.Duration{{2 * time.Second, 10 * time.Second}, {12 * time.Second, 20 * time.Second}} {
			var lat []time.Duration
			var ok, n [3]int
			for _, r := range ld.results {
				at := r.start.Sub(t0)
				if at < ph[0] || at >= ph[1] {
					continue
				}
				n[index(r.class)]++
				if r.admitted {
					ok[index(r.class)]++
					lat = append(lat, r.latency)
				}
			}
			slices.Sort(lat)
			secs := (ph[1] - ph[0]).Seconds()
			fmt.Printf("phase %v: goodput %.0f/s p50 %v p99 %v critical %d/%d default %d/%d sheddable %d/%d\n", ph, float64(len(lat))/secs, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), ok[0], n[0], ok[1], n[1], ok[2], n[2])
		}
	})
}

func TestExploreWorkers(t *testing.T) {
	explore(t, Options{MaxWait: 20 * time.Millisecond}, 1000, func(p *pool) { p.set(5, 50*time.Millisecond) }, func(i int) Class { return Default })
}

func TestExploreMix(t *testing.T) {
	explore(t, Options{MaxWait: 20 * time.Millisecond}, 1000, func(p *pool) { p.set(5, 50*time.Millisecond) }, func(i int) Class {
		switch i % 10 {
		case 0:
			return Critical
		case 1, 2, 3:
			return Default
		}
		return Sheddable
	})
}

func TestExploreMixNoWait(t *testing.T) {
	explore(t, Options{}, 1000, func(p *pool) { p.set(5, 50*time.Millisecond) }, func(i int) Class {
		switch i % 10 {
		case 0:
			return Critical
		case 1, 2, 3:
			return Default
		}
		return Sheddable
	})
}
