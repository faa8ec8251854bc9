// Package proxytest runs real proxies (nginx, Caddy) as processes of a
// test: found on the machine, on free loopback ports, stopped when the test
// ends. Tests that need one skip without it, unless SLUICE_REQUIRE_PROXIES
// is 1 (as in CI), when they fail.
package proxytest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Need returns the path of the named binary, or of the first of alt that
// exists, and skips the test when there is none (fails it instead with
// SLUICE_REQUIRE_PROXIES=1).
func Need(t *testing.T, name string, alt ...string) string {
	t.Helper()
	for _, n := range append([]string{name}, alt...) {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_PROXIES") == "1" {
		t.Fatalf("%s is not installed, and SLUICE_REQUIRE_PROXIES=1", name)
	}
	t.Skipf("%s is not installed; install it (apt-get install %s) to run this test", name, name)
	return ""
}

// FreeAddr returns a loopback address that was free a moment ago.
func FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Start starts cmd in its own process group and waits until addr accepts
// connections, failing the test if the process exits first or addr is
// not served within 30 s. It returns a function that stops the process
// (SIGTERM, which nginx's master passes on to its workers and which makes
// it finish the requests it has and write their log lines; SIGKILL to the
// group if it lingers for 10 s) and waits for it; the test's end calls it
// too, and calls after the first do nothing. The process's output is
// logged if the test failed.
func Start(t *testing.T, cmd *exec.Cmd, addr string) (stop func()) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "output.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	output := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second): // a safeguard, not a wait for time to pass
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), output())
		}
	})
	// The process is polled until it listens: it is a real process, which
	// only real time moves.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("%s exited: %v\n%s", filepath.Base(cmd.Path), err, output())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not listening on %s after 30s:\n%s", filepath.Base(cmd.Path), addr, output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
