package replay

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

var benchTolerance = 5 * time.Second

var benchStart = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

func loadTestConfig(tb testing.TB, path string) *config.Config {
	tb.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// BenchmarkParseCombined parses combined-format lines: the parser alone.
func BenchmarkParseCombined(b *testing.B) {
	var buf bytes.Buffer
	if err := genLog(&buf, 10000, 5000, 2000, benchStart); err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	var p combinedParser
	var req Request
	b.ReportAllocs()
	b.SetBytes(int64(buf.Len() / len(lines)))
	i := 0
	for b.Loop() {
		if err := p.parse(lines[i%len(lines)], &req); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkReplayCombined replays a generated combined-format log of
// 200,000 lines (5,000 clients, 2,000 requests a second of the log's
// time) with testdata/typical.yaml, from memory: reading, parsing,
// deciding and counting. It reports lines/s.
func BenchmarkReplayCombined(b *testing.B) {
	cfg := loadTestConfig(b, "testdata/typical.yaml")
	var buf bytes.Buffer
	const lines = 200000
	if err := genLog(&buf, lines, 5000, 2000, benchStart); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(buf.Len()))
	var total, cpu time.Duration
	for b.Loop() {
		start, cpu0 := time.Now(), cpuTime()
		rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{"-"}, Stdin: bytes.NewReader(buf.Bytes()), Tolerance: benchTolerance})
		total += time.Since(start)
		cpu += cpuTime() - cpu0
		if err != nil || rep.Requests != lines {
			b.Fatalf("Run: %v, %d requests", err, rep.Requests)
		}
	}
	b.ReportMetric(float64(lines)*float64(b.N)/total.Seconds(), "lines/s")
	b.ReportMetric(float64(lines)*float64(b.N)/cpu.Seconds(), "lines/cpu-s")
	b.ReportMetric(0, "ns/op")
}

// cpuTime returns the CPU time the process has used, user and system, on
// every thread: lines per CPU-second is the speed per core whatever else
// the machine runs, where lines per second of the wall clock is not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
