// Package clitest runs `sluice serve` in-process for tests: the one way a
// test of any package starts a real server from a config file.
package clitest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/syncbuf"
)

// Server is a `sluice serve` started by Start. Its exported fields are set
// before Start returns and do not change.
type Server struct {
	// Gateway and Admin are the base URLs of the gateway and of the admin
	// API: "http://" and the address, or "" for one that does not listen.
	Gateway, Admin string
	// Stderr collects serve's standard error (its log). It may be read
	// while serve runs; after Stop it holds everything serve wrote.
	Stderr *syncbuf.Buffer

	t      *testing.T
	cancel context.CancelFunc
	exited chan struct{} // closed once serve has returned code
	code   int
}

// Start runs `sluice serve --config path`, followed by args (such as
// "--log-format", "json"), and returns once it listens. It fails the test
// if serve exits before it listens. Serve runs until Stop is called or,
// at the latest, until the test and its subtests end.
func Start(t *testing.T, path string, args ...string) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Stderr: new(syncbuf.Buffer), t: t, cancel: cancel, exited: make(chan struct{})}
	addrs := make(chan [2]net.Addr, 1)
	go func() {
		defer close(s.exited)
		s.code = cli.RunWithReady(ctx, append([]string{"serve", "--config", path}, args...), io.Discard, s.Stderr,
			func(l, a net.Addr) { addrs <- [2]net.Addr{l, a} })
	}()
	t.Cleanup(func() { s.Stop() })
	select {
	case a := <-addrs:
		s.Gateway, s.Admin = baseURL(a[0]), baseURL(a[1])
	case <-s.exited:
		t.Fatalf("serve exited with %d before it listened: %s", s.code, s.Stderr.String())
	}
	return s
}

func baseURL(a net.Addr) string {
	if a == nil {
		return ""
	}
	return "http://" + a.String()
}

// Stop shuts serve down as SIGTERM does, waits for it to exit and returns
// its exit code. Calling it again returns the same code at once.
func (s *Server) Stop() int {
	s.cancel()
	<-s.exited
	return s.code
}

// Listening returns the addresses in serve's "sluice listening" log line,
// keyed as logged ("listen" for the gateway, "admin", "forward_auth",
// "grpc", "service_http"), one for each listener serve runs. It reads JSON
// logs, so serve must have been started with "--log-format", "json"; it
// fails the test if no such line has been logged.
func (s *Server) Listening() map[string]string {
	s.t.Helper()
	logs := s.Stderr.String()
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "sluice listening" {
			out := map[string]string{}
			for k, v := range m {
				if s, ok := v.(string); ok {
					out[k] = s
				}
			}
			return out
		}
	}
	s.t.Fatalf("no \"sluice listening\" line in:\n%s", logs)
	return nil
}

// Serve is shorthand for Start(t, path), for tests that need only the base
// URLs of the gateway and of the admin API and serve's standard error.
func Serve(t *testing.T, path string) (gateway, admin string, stderr *syncbuf.Buffer) {
	t.Helper()
	s := Start(t, path)
	return s.Gateway, s.Admin, s.Stderr
}
