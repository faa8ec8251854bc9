package cli_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
)

// serve refuses to start on an address it cannot bind, and says which
// listener, which address and why, whatever the log format and level; a
// port out of range is refused with the config's problems, at its line.
func TestServeReportsListenFailure(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	dir := t.TempDir()
	write := func(name, server string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("server: "+server+"\nupstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	gatewayTaken := write("gateway.yaml", "{listen: '"+addr+"', admin: off}")
	adminTaken := write("admin.yaml", "{listen: 127.0.0.1:0, admin: '"+addr+"'}")
	outOfRange := write("range.yaml", "\n  listen: 127.0.0.1:99999")
	for _, tc := range []struct {
		name string
		args []string
		want []string // each on stderr
	}{
		{"gateway port in use", []string{"--config", gatewayTaken}, []string{"gateway listener", addr, "address already in use"}},
		{"in use, debug logs", []string{"--config", gatewayTaken, "--log-level", "debug"}, []string{"gateway listener", addr, "address already in use"}},
		{"in use, JSON logs", []string{"--config", gatewayTaken, "--log-format", "json"}, []string{"gateway listener", addr, "address already in use"}},
		{"admin port in use", []string{"--config", adminTaken}, []string{"admin listener", addr, "address already in use"}},
		{"port out of range", []string{"--config", outOfRange}, []string{"range.yaml:2:11: server.listen: port 99999: want a number from 0 to 65535"}},
	} {
		var errb bytes.Buffer
		c := cli.Run(context.Background(), append([]string{"serve"}, tc.args...), io.Discard, &errb)
		if c != 1 {
			t.Errorf("%s: exit %d, want 1; stderr %q", tc.name, c, errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("%s: stderr %q lacks %q", tc.name, errb.String(), w)
			}
		}
	}
	var out, errb bytes.Buffer
	if c := cli.Run(context.Background(), []string{"check-config", outOfRange}, &out, &errb); c != 1 || !strings.Contains(errb.String(), "range.yaml:2:11: server.listen: port 99999") {
		t.Errorf("check-config: exit %d, stdout %q, stderr %q; want exit 1 and the port's problem at its line", c, out.String(), errb.String())
	}
}
