package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
)

// framesWriter collects sluice top's live output and ends the command once
// it has drawn want frames.
type framesWriter struct {
	mu     sync.Mutex
	b      bytes.Buffer
	want   int
	cancel context.CancelFunc
}

const clearScreen = "\x1b[H\x1b[2J"

func (f *framesWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.b.Write(p)
	if strings.Count(f.b.String(), clearScreen) >= f.want {
		f.cancel()
	}
	return len(p), nil
}

// sluice top shows the client over its limit first: as the API's JSON, as
// one text snapshot, and live, each frame replacing the last.
func TestTopCommand(t *testing.T) {
	gw, admin, tokenFile := serveAdmin(t)
	for _, k := range []string{"k-a", "k-b"} {
		send(t, gw+"/api", k)
	}
	for range 12 {
		send(t, gw+"/api", "k-loud")
	}
	base := []string{"top", "--admin", admin, "--token-file", tokenFile}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cli.Run(context.Background(), append(append([]string{}, base...), args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errs := run("--rule", "api", "--json", "-n", "3")
	var a struct {
		Rule    string
		By      string
		Window  int
		Entries []struct {
			Key               string
			Requests, Limited int
		}
	}
	if err := json.Unmarshal([]byte(out), &a); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v: %s%s", code, err, out, errs)
	}
	if a.Rule != "api" || a.By != "limited" || a.Window != 60 || len(a.Entries) != 1 || a.Entries[0].Key != "k-loud" || a.Entries[0].Limited != 10 {
		t.Errorf("--json: got %+v, want k-loud alone with 10 refusals", a)
	}

	code, out, errs = run("--rule", "api", "--once", "--by", "requests")
	lines := strings.Split(out, "\n")
	if code != 0 || !strings.Contains(out, "api (rule)") || !strings.Contains(out, "by requests, last 60s") {
		t.Fatalf("--once: exit %d:\n%s%s", code, out, errs)
	}
	for i, l := range lines {
		if strings.Contains(l, "by requests") {
			if f := strings.Fields(lines[i+1]); len(f) < 3 || f[0] != "k-loud" || f[1] != "10" || f[2] != "12" {
				t.Errorf("--once: the first client is %q, want k-loud with 10 limited of 12", lines[i+1])
			}
		}
	}
	if strings.Contains(out, "login") || strings.Contains(out, clearScreen) {
		t.Errorf("--once --rule api shows other rules or clears the screen:\n%s", out)
	}

	// Live: each frame clears the screen and draws every rule anew.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fw := &framesWriter{want: 3, cancel: cancel}
	if code := cli.Run(ctx, append(append([]string{}, base...), "--interval", "100ms"), fw, &bytes.Buffer{}); code != 0 {
		t.Fatalf("live: exit %d", code)
	}
	frames := strings.Split(fw.b.String(), clearScreen)[1:]
	if len(frames) < 3 {
		t.Fatalf("live: %d frames, want 3", len(frames))
	}
	for i, f := range frames {
		if !strings.Contains(f, "login (rule)") || !strings.Contains(f, "api (rule)") || !strings.Contains(f, "k-loud") {
			t.Errorf("frame %d:\n%s", i, f)
		}
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--rule", "nope", "--once"}, 1, `no rule "nope"`},
		{[]string{"--by", "allowed"}, 2, `--by "allowed": want limited or requests`},
		{[]string{"--once", "--json"}, 2, "want one of them"},
		{[]string{"-n", "0"}, 2, "-n 0"},
		{[]string{"extra"}, 2, "want no arguments"},
	} {
		code, _, errs := run(tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d %q, want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	var errb bytes.Buffer
	if code := cli.Run(context.Background(), []string{"top", "--admin", admin, "--token-file", ""}, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), "want --token-file") {
		t.Errorf("without a token file: exit %d %q", code, errb.String())
	}
}
