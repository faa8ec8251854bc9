package server_test

import (
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/server"
)

// unanswered returns the address of a loopback listener that completes no
// more connections: its accept queue (backlog 0) is full and it never
// accepts, so the kernel drops further connection attempts and a dial
// waits until its own timeout, as with a host that has vanished.
func unanswered(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the queue, until a dial no longer completes.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the listener kept completing connections: cannot make an address that never answers")
	return ""
}

// An upstream that cannot be reached within the dial timeout gets the
// client a 504 at that timeout, counted as a timeout; the response header
// timeout (a minute here) plays no part.
func TestGatewayUpstreamDialTimeout(t *testing.T) {
	addr := unanswered(t)
	g := start(t, server.Options{Upstream: "http://" + addr,
		Proxy:   proxy.Options{DialTimeout: 300 * time.Millisecond, ResponseHeaderTimeout: time.Minute},
		Limiter: httplimit.Options{Rules: perIP}})
	began := time.Now()
	r := get(t, "GET", g.url+"/unreachable", nil)
	took := time.Since(began)
	if r.StatusCode != http.StatusGatewayTimeout || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("status %d, Content-Type %q; want 504 with a problem document", r.StatusCode, r.Header.Get("Content-Type"))
	}
	if took < 300*time.Millisecond || took > 4*time.Second { // the default dial timeout is 5s
		t.Errorf("answered after %v, want at the 300ms dial timeout", took)
	}
	if got := metric(t, g.admin, `sluice_upstream_errors_total{kind="timeout"}`); got != "1" {
		t.Errorf("timeouts counted: %q, want 1", got)
	}
}
