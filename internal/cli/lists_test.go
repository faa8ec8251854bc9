package cli_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/cli/clitest"
)

const listsConfig = `server: {listen: 127.0.0.1:0, admin: 127.0.0.1:0}
upstream: builtin:echo
client_ip: {trusted_proxies: [127.0.0.1]}
lists:
  abusers: {cidrs_file: deny.txt}
  partners: {keys_file: partners.txt, key: header:X-API-Key}
deny: [abusers]
rules:
  - {name: per-key, key: [header:X-API-Key], algorithm: fixed_window, limit: 1, period: 1h, allow: [partners]}
  - {name: all, key: [global], algorithm: fixed_window, limit: 100, period: 1h}
`

// The gateway, over real HTTP: a deny-listed client gets 403 and is never
// counted, a partner's key skips its rule, the metrics count both, and a
// change of a list file applies without a restart.
func TestServeLists(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("deny.txt", "# abusers\n203.0.113.0/24\n")
	write("partners.txt", "k-partner\n")
	write("sluice.yaml", listsConfig)
	poll := cli.PollByHand(t)
	base, admin, stderr := clitest.Serve(t, filepath.Join(dir, "sluice.yaml"))
	send := func(client, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/", nil)
		req.Header.Set("X-Forwarded-For", client)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type") + " " + string(b)
	}
	for range 3 {
		if c, body := send("203.0.113.5", "k-x"); c != 403 || !strings.HasPrefix(body, "application/problem+json ") || !strings.Contains(body, `"status":403`) {
			t.Fatalf("deny-listed client: %d %s; want a 403 problem", c, body)
		}
	}
	for i := range 2 {
		if c, _ := send("198.51.100.1", "k-partner"); c != 200 {
			t.Fatalf("partner request %d: %d, want 200", i, c)
		}
	}
	if c, _ := send("198.51.100.2", "k-other"); c != 200 {
		t.Fatalf("k-other's first request: %d", c)
	}
	if c, _ := send("198.51.100.2", "k-other"); c != 429 {
		t.Fatalf("k-other's second request: %d, want 429", c)
	}
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m bytes.Buffer
	io.Copy(&m, resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sluice_list_matches_total{action="deny",list="abusers"} 3`,
		`sluice_list_matches_total{action="allow",list="partners"} 2`,
		`sluice_requests_total{outcome="denied"} 3`,
		`sluice_decisions_total{outcome="allow_listed",rule="per-key"} 2`,
		// Only the partner's two and k-other's first were counted.
		`sluice_decisions_total{outcome="allowed",rule="all"} 3`,
	} {
		if !strings.Contains(m.String(), want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}

	// A changed list file applies within seconds, without a restart.
	write("deny.txt", "198.51.100.2\n")
	poll()
	if c, _ := send("198.51.100.2", "k-other"); c != 403 {
		t.Fatalf("after a check for changes, a client the changed deny list names: %d, want 403: %s", c, stderr.String())
	}
	if c, _ := send("203.0.113.5", "k-y"); c != 200 {
		t.Errorf("a client no longer deny-listed: %d, want 200", c)
	}
	// A broken list file is reported, and the running lists stay.
	write("partners.txt", "k-partner\nbad\x01key\n")
	poll()
	if !strings.Contains(stderr.String(), fmt.Sprintf("%s:2: lists.partners.keys_file", filepath.Join(dir, "partners.txt"))) {
		t.Fatalf("after a check for changes, the bad line is not reported: %s", stderr.String())
	}
	if c, _ := send("198.51.100.1", "k-partner"); c != 200 {
		t.Errorf("partner after a failed reload: %d, want 200", c)
	}
}
