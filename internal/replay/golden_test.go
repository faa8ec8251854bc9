package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/generated.golden.json from this code")

// generatedLog is a combined-format log of 60,000 lines from 100 clients
// at 500 a second (two minutes, so that every client is limited by some
// rule), made untidy: every 101st line swapped with the next (out of order
// within the tolerance), every 1,009th replaced by garbage (unparsed), and
// every 2,003rd moved 12,000 lines on (a minute late).
func generatedLog(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := genLog(&buf, 60000, 100, 500, benchStart); err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(buf.Bytes(), []byte("\n"))
	lines = lines[:len(lines)-1] // the empty remainder after the last newline
	for i := 100; i+1 < len(lines); i += 101 {
		lines[i], lines[i+1] = lines[i+1], lines[i]
	}
	for i := 1008; i < len(lines); i += 1009 {
		lines[i] = []byte("not a line of any log format\n")
	}
	var out bytes.Buffer
	var moved [][]byte
	for i, l := range lines {
		if i%2003 == 2002 {
			moved = append(moved, l)
		} else {
			out.Write(l)
		}
		if i%12000 == 11999 {
			for _, m := range moved {
				out.Write(m)
			}
			moved = moved[:0]
		}
	}
	for _, m := range moved {
		out.Write(m)
	}
	return out.Bytes()
}

// goldenRun is one replay of the generated log: its report, and a digest
// of every request's outcome and delay in the order they were decided.
type goldenRun struct {
	Report    *Report `json:"report"`
	Decisions string  `json:"decisions"`
}

// TestGeneratedLogReport replays the generated log with two
// configurations, each against the other and with suggestions, and holds
// each report, and each request's decision, to the ones recorded in
// testdata/generated.golden.json. A change meant to make replay faster
// must leave both as they are; `go test ./internal/replay/ -run
// TestGeneratedLogReport -args -update` records them again after a change
// that means to alter them.
func TestGeneratedLogReport(t *testing.T) {
	log := generatedLog(t)
	typical := loadTestConfig(t, "testdata/typical.yaml")
	live := loadTestConfig(t, "testdata/live.yaml")
	got := map[string]goldenRun{}
	for name, opts := range map[string]Options{
		"typical against live": {Config: typical, ConfigName: "typical.yaml", Against: live, AgainstName: "live.yaml"},
		"live against typical": {Config: live, ConfigName: "live.yaml", Against: typical, AgainstName: "typical.yaml"},
	} {
		opts.Logs, opts.Stdin = []string{"-"}, bytes.NewReader(log)
		opts.Tolerance, opts.Suggest = 5*time.Second, true
		r, err := newRun(opts)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		var rec [8 + 1 + 8]byte
		r.decided = func(e *entry, o httplimit.Outcome, d time.Duration) {
			binary.LittleEndian.PutUint64(rec[0:], uint64(e.line))
			rec[8] = byte(o)
			binary.LittleEndian.PutUint64(rec[9:], uint64(d))
			h.Write(rec[:])
		}
		rep, err := r.do(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Limited == 0 || rep.Late == 0 || rep.Unparsed == 0 {
			t.Fatalf("%s: the log tests too little: %d limited, %d late, %d unparsed", name, rep.Limited, rep.Late, rep.Unparsed)
		}
		got[name] = goldenRun{Report: rep, Decisions: hex.EncodeToString(h.Sum(nil))}
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	const path = "testdata/generated.golden.json"
	if *updateGolden {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		var wantRuns map[string]goldenRun
		if err := json.Unmarshal(want, &wantRuns); err != nil {
			t.Fatal(err)
		}
		for name, g := range got {
			w := wantRuns[name]
			if g.Decisions != w.Decisions {
				t.Errorf("%s: the requests were decided differently from the recorded replay", name)
			}
			gb, _ := json.MarshalIndent(g.Report, "", "  ")
			wb, _ := json.MarshalIndent(w.Report, "", "  ")
			if !bytes.Equal(gb, wb) {
				t.Errorf("%s: the report differs from the recorded one:\n%s", name, firstDiff(string(gb), string(wb)))
			}
		}
	}
}

// firstDiff shows where two texts first differ, with some context.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-200)
	return "got:  ..." + got[from:min(len(got), i+200)] + "\nwant: ..." + want[from:min(len(want), i+200)]
}

// TestReportIsReproducible replays the same log several times through Run,
// as the command does, and wants the same report each time: which rules a
// refused request counts as limited must not depend on how the store
// happens to lay out its keys. The log's 2,000 clients are each refused
// often by two rules, so that the store's memory of recent denials is
// shared by many keys.
func TestReportIsReproducible(t *testing.T) {
	var log bytes.Buffer
	if err := genLog(&log, 40000, 2000, 2000, benchStart); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "strict.yaml")
	if err := os.WriteFile(path, []byte(`upstream: builtin:echo
rules:
  - name: api
    match: { path: /api/* }
    key: [ip]
    algorithm: fixed_window
    limit: 1
    period: 10s
  - name: per-ip
    match: { path: /* }
    key: [ip]
    algorithm: sliding_window
    limit: 3
    period: 1m
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := loadTestConfig(t, path)
	var first []byte
	for i := range 4 {
		rep, err := Run(context.Background(), Options{Config: cfg, Logs: []string{"-"}, Stdin: bytes.NewReader(log.Bytes())})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Limited < 10000 {
			t.Fatalf("the log limited %d requests: too few for the test to prove anything", rep.Limited)
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Fatalf("replay %d reported\n%s\nreplay 1 reported\n%s", i+1, b, first)
		}
	}
}

// TestNoteWhenTheStoreForgets replays 2,000 clients on a store too small
// for them: the report says that the store forgot state in use, which
// changes decisions, and the same log on the default store says nothing.
func TestNoteWhenTheStoreForgets(t *testing.T) {
	var log bytes.Buffer
	if err := genLog(&log, 20000, 2000, 2000, benchStart); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		store string
		want  bool
	}{{"store: { max_keys: 100 }\n", true}, {"", false}} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		cfg := tc.store + "rules:\n  - { name: per-ip, match: { path: /* }, key: [ip], algorithm: sliding_window, limit: 3, period: 1m }\n"
		if err := os.WriteFile(path, []byte("upstream: builtin:echo\n"+cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Run(context.Background(), Options{Config: loadTestConfig(t, path), Logs: []string{"-"}, Stdin: bytes.NewReader(log.Bytes())})
		if err != nil {
			t.Fatal(err)
		}
		got := slices.ContainsFunc(rep.Notes, func(n string) bool {
			return strings.HasPrefix(n, "the store forgot the state of ") && strings.Contains(n, "store.max_keys (100)")
		})
		if got != tc.want {
			t.Errorf("store %q: notes %q, want the note of a full store: %v", tc.store, rep.Notes, tc.want)
		}
	}
}
