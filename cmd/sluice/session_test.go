package main_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// step is one command of a console session in the docs, and the output
// the docs show for it.
type step struct {
	cmd  string
	want []string
}

// consoleSession returns the steps of the first console block after the
// heading in the page, a path relative to the repository's root.
func consoleSession(t *testing.T, page, heading string) []step {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", page, heading)
	}
	_, rest, ok = strings.Cut(rest, "\n```console\n")
	if !ok {
		t.Fatalf("%s has no console block after %q", page, heading)
	}
	block, _, _ := strings.Cut(rest, "\n```\n")
	var steps []step
	for _, line := range strings.Split(block, "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, step{cmd: cmd})
			continue
		}
		if len(steps) == 0 {
			t.Fatalf("%s's session after %q starts with output: %q", page, heading, line)
		}
		steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
	}
	return steps
}

// durationField is a field that holds a duration as Go prints one, such
// as a key's FULL IN: it depends on when the command ran.
var durationField = regexp.MustCompile(`^(\d+h)?(\d+m)?(\d+(\.\d+)?(s|ms|µs|ns))?$`)

// normalize returns the lines' fields, with durations as DURATION: what a
// table holds, whatever the widths of its columns.
func normalize(lines []string) string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		for i, w := range f {
			if durationField.MatchString(w) {
				f[i] = "DURATION"
			}
		}
		if len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return strings.Join(out, "\n")
}

// The admin API session of docs/operations.md runs as written against the
// quickstart, turned on as the page says (a token, and the config's three
// admin lines uncommented while the gateway runs), with the sluice command
// built at ./bin/sluice and curl: every command prints what the page
// shows, but for durations, which depend on when it runs.
func TestOperationsAdminSession(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the admin API session needs curl on PATH")
	}
	steps := consoleSession(t, "docs/operations.md", "## The admin API")
	root := t.TempDir() // stands for the repository's root
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(buildSluice(t), filepath.Join(root, "bin", "sluice")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	quickstart := strings.Replace(string(b), "listen: 127.0.0.1:8080", "listen: 127.0.0.1:0", 1)
	quickstart = strings.Replace(quickstart, "admin: 127.0.0.1:9090", "admin: 127.0.0.1:0", 1)
	if err := os.MkdirAll(filepath.Join(root, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(root, "examples", "quickstart.yaml")
	writeConfig(t, config, quickstart)
	p := serve(t, filepath.Join(root, "bin", "sluice"), config)

	// "make a token ... and uncomment the three admin lines at the end of
	// examples/quickstart.yaml: the running gateway turns the API on".
	if err := os.WriteFile(filepath.Join(root, "examples", "admin-token"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(quickstart, "\n")
	uncommented := 0
	for i, l := range lines {
		for _, c := range []string{"# admin:", "#   api: true", "#   token_file: admin-token"} {
			if strings.HasPrefix(l, c) {
				lines[i] = strings.TrimPrefix(l, "# ")
				uncommented++
			}
		}
	}
	if uncommented != 3 {
		t.Fatalf("examples/quickstart.yaml has %d of the three commented admin lines docs/operations.md tells to uncomment", uncommented)
	}
	writeConfig(t, config, strings.Join(lines, "\n"))
	eventually(t, "the reload that turns the admin API on", func() bool { return p.logged("configuration reloaded", nil) })

	// An until in the future whenever the test runs: the page's, moved on.
	until := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	future := time.Now().UTC().AddDate(1, 0, 0).Truncate(24 * time.Hour).Format(time.RFC3339)
	gateway := strings.TrimPrefix(p.url, "http://")
	var script strings.Builder
	script.WriteString("set -u\n")
	for i, s := range steps {
		cmd := until.ReplaceAllString(s.cmd, future)
		cmd = strings.ReplaceAll(cmd, "localhost:8080", gateway)
		fmt.Fprintf(&script, "echo '@@@ step %d'\n%s\n", i, cmd)
	}
	sh := exec.Command("bash", "-c", script.String())
	sh.Dir = root
	// The session's own export names the token file; the admin listener
	// is on a free port here, not the quickstart's 9090.
	sh.Env = append(os.Environ(), "SLUICE_ADMIN_URL="+p.admin, "SLUICE_ADMIN_TOKEN_FILE=")
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	if err := sh.Run(); err != nil {
		t.Fatalf("the session: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("the session wrote on stderr:\n%s", stderr.String())
	}
	outputs := strings.Split(stdout.String(), "@@@ step ")[1:]
	if len(outputs) != len(steps) {
		t.Fatalf("%d outputs for %d steps:\n%s", len(outputs), len(steps), stdout.String())
	}
	for i, s := range steps {
		_, got, _ := strings.Cut(outputs[i], "\n")
		want := strings.Join(s.want, "\n")
		want = until.ReplaceAllString(want, future)
		if normalize(strings.Split(got, "\n")) != normalize(strings.Split(want, "\n")) {
			t.Errorf("$ %s\ngot:\n%s\ndocs/operations.md shows:\n%s", s.cmd, got, want)
		}
	}
}
