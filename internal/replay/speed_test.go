package replay

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReplaySpeed measures the speed goal: a generated combined-format log
// of 10 million lines from 100,000 clients (SLUICE_REPLAY_LINES and
// SLUICE_REPLAY_CLIENTS to change them) replayed with
// testdata/typical.yaml from a file, reporting lines per second of the
// wall clock and per CPU-second (the speed of one core, whatever else the
// machine runs), the most memory the process held, and the machine's load
// before and after each run. It runs only with SLUICE_REPLAY_SPEED set to
// the number of runs (it writes about 1.6 GB to the temporary directory):
//
//	SLUICE_REPLAY_SPEED=5 go test -run TestReplaySpeed -v -timeout 60m ./internal/replay/
//
// With SLUICE_REPLAY_FLOOR set too, it then measures what bounds the speed
// on the same log (see floor). It asserts nothing about the speed: speed
// goals are not timed tests.
func TestReplaySpeed(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("SLUICE_REPLAY_SPEED"))
	if runs <= 0 {
		t.Skip("set SLUICE_REPLAY_SPEED to the number of runs to measure the replay's speed")
	}
	lines := 10_000_000
	if n, err := strconv.Atoi(os.Getenv("SLUICE_REPLAY_LINES")); err == nil && n > 0 {
		lines = n
	}
	clients := 100_000
	if n, err := strconv.Atoi(os.Getenv("SLUICE_REPLAY_CLIENTS")); err == nil && n > 0 {
		clients = n
	}
	path := filepath.Join(t.TempDir(), "access.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 clients, 2,000 requests a second: 83 minutes of a busy API.
	if err := genLog(f, lines, clients, 2000, benchStart); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	f.Close()
	t.Logf("log: %d lines, %d clients, %d bytes", lines, clients, st.Size())
	cfg := loadTestConfig(t, "testdata/typical.yaml")
	// Read the file once so that every run reads it from the page cache.
	if f, err := os.Open(path); err == nil {
		io.Copy(io.Discard, f)
		f.Close()
	}
	for i := range runs {
		load0 := loadAvg()
		start, cpu0 := time.Now(), cpuTime()
		rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{path}, Tolerance: 5 * time.Second})
		wall, cpu := time.Since(start), cpuTime()-cpu0
		if err != nil {
			t.Fatal(err)
		}
		if rep.Requests != int64(lines) {
			t.Fatalf("%d requests of %d lines", rep.Requests, lines)
		}
		t.Logf("run %d: %.0f lines/s, %.0f lines/cpu-s (wall %v, cpu %v), max RSS %d MiB, load %s -> %s, limited %d",
			i+1, float64(lines)/wall.Seconds(), float64(lines)/cpu.Seconds(), wall.Round(time.Millisecond), cpu.Round(time.Millisecond),
			maxRSS()>>20, load0, loadAvg(), rep.Limited)
	}
	if os.Getenv("SLUICE_REPLAY_FLOOR") != "" {
		floor(t, path, lines)
	}
}

// floor measures, on the same log, what a replay does before deciding:
// splitting the file into lines; that and parsing each; and that with the
// lines held in time order within the tolerance, as a replay holds them.
// Their speeds bound the replay's.
func floor(t *testing.T, path string, lines int) {
	for _, stage := range []string{"split", "split+parse", "split+hold+parse"} {
		lr, err := openLog(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		var p combinedParser
		var req Request
		r := &run{}
		src := &source{lr: lr, p: &p, tol: int64(5 * time.Second)}
		load0 := loadAvg()
		start, cpu0 := time.Now(), cpuTime()
		n := 0
		switch stage {
		case "split":
			for {
				if _, _, err := lr.next(); err != nil {
					break
				}
				n++
			}
		case "split+parse":
			for {
				line, _, err := lr.next()
				if err != nil {
					break
				}
				if p.parse(line, &req) == nil {
					n++
				}
			}
		default:
			for e := src.next(r); e != nil; e = src.next(r) {
				if p.parse(e.buf, &req) == nil {
					n++
				}
				r.freeEntry(e)
			}
		}
		wall, cpu := time.Since(start), cpuTime()-cpu0
		lr.close()
		if n != lines {
			t.Fatalf("%s: %d lines of %d", stage, n, lines)
		}
		t.Logf("floor, %s: %.0f lines/s, %.0f lines/cpu-s (wall %v, cpu %v), load %s -> %s",
			stage, float64(n)/wall.Seconds(), float64(n)/cpu.Seconds(), wall.Round(time.Millisecond), cpu.Round(time.Millisecond), load0, loadAvg())
	}
}

// loadAvg returns the machine's load averages over 1, 5 and 15 minutes.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// maxRSS returns the most memory the process has held, in bytes.
func maxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss << 10
}
