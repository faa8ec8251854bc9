// Package clitest runs the sluice command in-process for tests of other
// packages that need a real `sluice serve`.
package clitest

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// Serve runs `sluice serve --config path` until the test ends and returns
// the base URLs of its gateway and of its admin API ("http://" and the
// address; "" for one that does not listen) and its standard error. It
// fails the test if serve exits before it listens.
func Serve(t *testing.T, path string) (gateway, admin string, stderr *syncbuf.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]net.Addr, 1)
	code := make(chan int, 1)
	stderr = new(syncbuf.Buffer)
	go func() {
		code <- cli.RunWithReady(ctx, []string{"serve", "--config", path}, io.Discard, stderr,
			func(l, a net.Addr) { addrs <- [2]net.Addr{l, a} })
	}()
	t.Cleanup(func() { cancel(); <-code })
	select {
	case a := <-addrs:
		url := func(a net.Addr) string {
			if a == nil {
				return ""
			}
			return "http://" + a.String()
		}
		return url(a[0]), url(a[1]), stderr
	case c := <-code:
		t.Fatalf("serve exited with %d: %s", c, stderr.String())
	}
	return "", "", stderr
}
