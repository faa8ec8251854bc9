package cli_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
)

const replayLog = `203.0.113.7 - - [10/Oct/2023:13:55:36 +0000] "POST /login HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.7 - - [10/Oct/2023:13:55:37 +0000] "POST /login HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.7 - - [10/Oct/2023:13:55:37 +0000] "POST /login HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.7 - - [10/Oct/2023:13:55:38 +0000] "POST /login HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.7 - - [10/Oct/2023:13:55:38 +0000] "POST /login HTTP/1.1" 200 512 "-" "curl/8.5.0"
203.0.113.7 - - [10/Oct/2023:13:55:39 +0000] "POST /login HTTP/1.1" 200 512 "-" "curl/8.5.0"
garbage
198.51.100.1 - - [10/Oct/2023:13:55:40 +0000] "GET /api/search HTTP/1.1" 200 512 "-" "curl/8.5.0"
`

func runReplay(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.RunWithStdin(context.Background(), append([]string{"replay"}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log.gz")
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write([]byte(replayLog))
	w.Close()
	if err := os.WriteFile(logPath, z.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	const cfg = "../../examples/quickstart.yaml"

	// Text, from a gzip file, with the flags after the log.
	code, out, errs := runReplay(t, "", logPath, "--config", cfg)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"Replayed 7 requests from 8 lines", "Limited (429): 1", "login limited 1 of 1 clients", "ip=203.0.113.7/32", "access.log.gz:7: not in the log format"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text report lacks %q:\n%s", want, out)
		}
	}

	// JSON, from the standard input, with suggestions and an HTML file.
	html := filepath.Join(dir, "report.html")
	code, out, errs = runReplay(t, replayLog, "--config", cfg, "--json", "--suggest", "--max-clients-limited", "1%", "--html", html, "-")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var rep struct {
		Lines    int64 `json:"lines"`
		Unparsed int64 `json:"unparsed"`
		Rules    []struct {
			Rule           string `json:"rule"`
			Matched        int64  `json:"matched"`
			Admitted       int64  `json:"admitted"`
			Limited        int64  `json:"limited"`
			Delayed        int64  `json:"delayed"`
			Clients        int64  `json:"clients"`
			ClientsLimited int64  `json:"clients_limited"`
			Top            []struct {
				Key     string `json:"key"`
				Limited int64  `json:"limited"`
			} `json:"top"`
			Suggest *struct {
				MaxClientsLimited float64 `json:"max_clients_limited"`
			} `json:"suggest"`
		} `json:"rules"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("the JSON report: %v\n%s", err, out)
	}
	if rep.Lines != 8 || rep.Unparsed != 1 || len(rep.Rules) != 6 {
		t.Fatalf("lines %d, unparsed %d, %d rules", rep.Lines, rep.Unparsed, len(rep.Rules))
	}
	login := rep.Rules[1]
	if login.Rule != "login" || login.Matched != 6 || login.Admitted != 5 || login.Limited != 1 || login.Clients != 1 || login.ClientsLimited != 1 ||
		len(login.Top) != 1 || login.Top[0].Key != "ip=203.0.113.7/32" || login.Top[0].Limited != 1 || login.Suggest == nil || login.Suggest.MaxClientsLimited != 0.01 {
		t.Errorf("login: %+v", login)
	}
	if page, err := os.ReadFile(html); err != nil || !bytes.Contains(page, []byte(`<svg class="plot" data-rule="login"`)) {
		t.Errorf("the HTML report: %v", err)
	}
}

func TestReplayCommandErrors(t *testing.T) {
	const cfg = "../../examples/quickstart.yaml"
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-"}, 2, "sluice replay: want --config FILE"},
		{[]string{"--config", cfg}, 2, "want at least one LOG"},
		{[]string{"--config", cfg, "--format", "w3c", "-"}, 2, `--format "w3c": want combined, json, envoy, istio or caddy`},
		{[]string{"--config", cfg, "--max-clients-limited", "2", "-"}, 2, "want a share from 0% to 100%"},
		{[]string{"--config", cfg, "--json-fields", "colour=x", "-"}, 2, `json field role "colour"`},
		{[]string{"--config", cfg, "--tolerance", "-1s", "-"}, 2, "--tolerance -1s"},
		{[]string{"--config", cfg, "--nope", "-"}, 2, "flag provided but not defined"},
		{[]string{"--config", cfg, "/nonexistent/access.log"}, 1, "no such file or directory"},
		{[]string{"--config", "/nonexistent.yaml", "-"}, 1, "/nonexistent.yaml: cannot read the config file"},
		{[]string{"--config", cfg, "--against", "/nonexistent.yaml", "-"}, 1, "/nonexistent.yaml: cannot read the config file"},
	} {
		code, _, errs := runReplay(t, "", tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.want) {
			t.Errorf("replay %q: exit %d, stderr %q; want %d and %q", tt.args, code, errs, tt.code, tt.want)
		}
	}
	if code, out, _ := runReplay(t, "", "-h"); code != 0 || !strings.Contains(out, "Usage: sluice replay --config FILE") || !strings.Contains(out, "--max-clients-limited SHARE") {
		t.Errorf("replay -h: exit %d, %q", code, out)
	}
}
