// Package redistest starts real redis-server processes for tests, each on a
// free loopback port and a Unix socket of its own, with its own directory,
// and stops them when the test ends. It never touches a Redis that something
// else runs.
//
// Tests call Start or StartCluster. When redis-server is not installed they
// are skipped with a message, unless the environment sets
// SLUICE_REQUIRE_REDIS=1 (as CI does), which makes them fail instead: CI
// never passes by silently skipping.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a redis-server process started for a test.
type Server struct {
	Addr string // host:port
	Port int
	// Socket is the path of the server's Unix socket. No other process
	// can ever listen there, whereas a port freed by Stop can be taken by
	// a server of another test running meanwhile: clients of a server that
	// a test stops and restarts should connect through URL.
	Socket string

	bin  string
	dir  string
	conf string // a configuration file to start with, first on the command line
	args []string
	cmd  *exec.Cmd
}

// binary returns the redis-server path, or skips or fails t.
func binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis-server not found and SLUICE_REQUIRE_REDIS=1: %v", err)
		}
		t.Skip("redis-server not installed: skipping (install it, e.g. apt-get install redis-server; CI sets SLUICE_REQUIRE_REDIS=1 and never skips)")
	}
	return bin
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts a redis-server with persistence off and the given extra
// arguments (such as "--cluster-enabled", "yes"), waits until it answers,
// and stops it when t ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s := &Server{bin: binary(t), dir: t.TempDir(), args: args}
	s.launch(t, "redis-server", nil)
	return s
}

// URL returns the server's address as a Unix socket URL for
// redisstore.Options.URL.
func (s *Server) URL() string { return "unix://" + s.Socket }

// launch starts s on a free port, retrying with another port if the one
// picked was taken meanwhile, after prepare (if any), and stops it when t
// ends.
func (s *Server) launch(t testing.TB, what string, prepare func()) {
	t.Helper()
	// The socket's own directory is short: a socket path may not exceed
	// about 100 bytes, and test names make long temporary directories.
	sockDir, err := os.MkdirTemp("", "redis")
	if err != nil {
		t.Fatalf("socket directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	s.Socket = filepath.Join(sockDir, "redis.sock")
	for attempt := 0; ; attempt++ {
		if prepare != nil {
			prepare()
		}
		s.Port = freePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			t.Fatalf("starting %s: %v", what, err)
		}
	}
	t.Cleanup(s.Stop)
}

func (s *Server) start() error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args,
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--unixsocket", s.Socket, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	)
	args = append(args, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.ping() == nil {
			return nil
		}
		if s.cmd.ProcessState != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return fmt.Errorf("redis-server on %s did not answer PING; its log:\n%s", s.Addr, log)
}

// Stop kills the server, as a crash would, and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server process with SIGSTOP: it keeps its port, and the
// kernel keeps accepting connections for it, but it answers nothing, like a
// Redis stuck in a long command or behind a partition that drops packets.
// Resume, Restart and Stop end the pause.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP, "pausing")
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT, "resuming")
}

func (s *Server) signal(t testing.TB, sig syscall.Signal, doing string) {
	t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("%s redis-server on %s: not running", doing, s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s redis-server on %s: %v", doing, s.Addr, err)
	}
}

// Restart starts the server again on the same port, empty: like a Redis
// restarted without persistence, it has lost every key and script.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		t.Fatalf("restarting redis-server: %v", err)
	}
}

// Do sends one command and returns its reply line, for test setup and
// inspection. Bulk replies are returned as their content, arrays as their
// elements joined by newlines (see DoList).
func (s *Server) Do(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.do(args...)
	if err != nil {
		t.Fatalf("redis %v on %s: %v", args, s.Addr, err)
	}
	return out
}

// DoList sends one command and returns its reply as a list: the elements of
// an array reply, flattened, with nil elements as empty strings, or a
// one-element list for any other reply. For KEYS, ZRANGE and the like.
func (s *Server) DoList(t testing.TB, args ...string) []string {
	t.Helper()
	out, err := s.doList(args...)
	if err != nil {
		t.Fatalf("redis %v on %s: %v", args, s.Addr, err)
	}
	return out
}

func (s *Server) ping() error {
	out, err := s.do("PING")
	if err == nil && out != "PONG" {
		err = fmt.Errorf("PING answered %q", out)
	}
	return err
}

func (s *Server) do(args ...string) (string, error) {
	out, err := s.doList(args...)
	return strings.Join(out, "\n"), err
}

func (s *Server) doList(args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c), nil)
}

// readReply appends the RESP2 reply read from r to out, flattening arrays.
func readReply(r *bufio.Reader, out []string) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return out, err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "-"):
		return out, fmt.Errorf("%s", line[1:])
	case strings.HasPrefix(line, "$-1"), strings.HasPrefix(line, "*-1"):
		return append(out, ""), nil
	case strings.HasPrefix(line, "$"):
		n, _ := strconv.Atoi(line[1:])
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return out, err
		}
		return append(out, string(buf[:n])), nil
	case strings.HasPrefix(line, "*"):
		n, _ := strconv.Atoi(line[1:])
		if out == nil {
			out = []string{}
		}
		for range n {
			if out, err = readReply(r, out); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return append(out, strings.TrimLeft(line, "+:")), nil
}

// StartCluster starts a Redis Cluster of masters nodes without replicas and
// waits until every slot is served. It returns the nodes.
func StartCluster(t testing.TB, masters int) []*Server {
	t.Helper()
	nodes := make([]*Server, masters)
	addrs := make([]string, masters)
	for i := range nodes {
		nodes[i] = Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs[i] = nodes[i].Addr
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli, needed to create a cluster, not found: %v", err)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range nodes {
		for {
			info, err := n.do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ready: %v %q", n.Addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nodes
}

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) that
// monitors master under the name masterSet with a quorum of one, waits until
// it reports the master's address, and stops it when t ends. Clients find
// the master by asking it, as with Options{Addrs: sentinel, MasterSet: name}.
func StartSentinel(t testing.TB, masterSet string, master *Server) *Server {
	t.Helper()
	s := &Server{bin: binary(t), dir: t.TempDir(), args: []string{"--sentinel"}}
	// Sentinel rewrites its configuration file, so it must be its own.
	s.conf = filepath.Join(s.dir, "sentinel.conf")
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 5000\n", masterSet, master.Port, masterSet)
	s.launch(t, "redis sentinel", func() {
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatalf("writing sentinel configuration: %v", err)
		}
	})
	want := "127.0.0.1\n" + strconv.Itoa(master.Port) // host and port, as Do joins them
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterSet)
		if err == nil && got == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s does not report master %s: got %q, %v; want %q", s.Addr, masterSet, got, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
