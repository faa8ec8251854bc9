package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// buildSluice builds the sluice command into a temporary directory, with
// flags for go build.
func buildSluice(t *testing.T, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a running `sluice serve`.
type process struct {
	cmd        *exec.Cmd
	url, admin string
	mu         sync.Mutex
	logs       []map[string]any
	raw        strings.Builder
	exited     chan struct{}
}

// serve starts bin on the config file at path and waits until it listens.
func serve(t *testing.T, bin, path string) *process {
	t.Helper()
	p := &process{exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", "--config", path, "--log-format", "json")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			p.mu.Lock()
			p.raw.WriteString(sc.Text() + "\n")
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.logs = append(p.logs, m)
				if m["msg"] == "sluice listening" {
					listening <- m
				}
			}
			p.mu.Unlock()
		}
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	select {
	case m := <-listening:
		p.url, p.admin = "http://"+m["listen"].(string), "http://"+m["admin"].(string)
	case <-p.exited:
		t.Fatalf("sluice serve exited: %s", p.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice serve did not listen within 30s: %s", p.stderr())
	}
	return p
}

func (p *process) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// logged reports whether a log line has message msg and every attribute
// in attrs (compared as strings).
func (p *process) logged(msg string, attrs map[string]string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
next:
	for _, m := range p.logs {
		if m["msg"] != msg {
			continue
		}
		for k, v := range attrs {
			if !strings.Contains(fmt.Sprint(m[k]), v) {
				continue next
			}
		}
		return true
	}
	return false
}

func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// metric returns the value of a series on /metrics, or "" without it.
func (p *process) metric(t *testing.T, series string) string {
	t.Helper()
	resp, err := http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}

// eventually polls cond until it holds, failing t after 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func request(t *testing.T, url string) (int, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

const configTemplate = `server:
  listen: 127.0.0.1:0
  admin: 127.0.0.1:0
  shutdown_timeout: 20s
upstream: %s
rules:
  - name: r
    match: { path: /r }
    algorithm: fixed_window
    limit: %d
    period: 1h
  - name: k
    match: { path: /k }
    algorithm: fixed_window
    limit: 2
    period: 1h
  - name: busy
    match: { path: /busy }
    algorithm: fixed_window
    limit: 1000000
    period: 1h
`

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	// Write and rename, as an operator's tools do, so that the gateway
	// never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestServeReloads(t *testing.T) {
	bin := buildSluice(t)
	release := make(chan struct{})
	var slowStarted atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			slowStarted.Store(true)
			<-release
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := func(limit int) string { return fmt.Sprintf(configTemplate, up.URL, limit) }
	writeConfig(t, path, cfg(3))
	p := serve(t, bin, path)
	reloads := func(result string) int {
		n, _ := strconv.Atoi(p.metric(t, `sluice_config_reloads_total{result="`+result+`"}`))
		return n
	}

	for i := range 3 {
		if code, _ := request(t, p.url+"/r"); code != 200 {
			t.Fatalf("request %d to /r: %d", i, code)
		}
	}
	if code, _ := request(t, p.url+"/r"); code != 429 {
		t.Fatalf("fourth request to /r: %d, want 429", code)
	}
	for range 2 {
		request(t, p.url+"/k")
	}
	if code, _ := request(t, p.url+"/k"); code != 429 {
		t.Fatalf("/k past its limit: %d, want 429", code)
	}

	// A request in flight while the configuration changes completes.
	slow := make(chan int, 1)
	go func() {
		resp, err := http.Get(p.url + "/slow")
		if err != nil {
			slow <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	eventually(t, "the slow request reaching the upstream", slowStarted.Load)

	// SIGHUP applies a changed limit and keeps the process running.
	writeConfig(t, path, cfg(5))
	p.signal(t, syscall.SIGHUP)
	eventually(t, "a successful reload", func() bool { return reloads("success") >= 1 })
	if _, h := request(t, p.url+"/r"); h.Get("RateLimit-Policy") != `"r";q=5;w=3600` {
		t.Errorf("after the reload, RateLimit-Policy = %q, want the new limit of 5", h.Get("RateLimit-Policy"))
	}
	// A client at its limit under an unchanged rule stays at its limit.
	if code, _ := request(t, p.url+"/k"); code != 429 {
		t.Errorf("/k after the reload: %d, want 429: the reload reset its counter", code)
	}
	close(release)
	if code := <-slow; code != 200 {
		t.Errorf("request in flight during the reload: %d, want 200", code)
	}
	hash := p.metric(t, `sluice_config_info{hash="`+hashOf(t, path)+`"}`)
	if hash != "1" {
		t.Errorf("sluice_config_info for the new file's hash = %q, want 1", hash)
	}

	// A bad file is refused with check-config's message; the old rules stay.
	writeConfig(t, path, strings.Replace(cfg(5), "limit: 2\n", "limit: 0\n", 1))
	p.signal(t, syscall.SIGHUP)
	eventually(t, "a failed reload", func() bool { return reloads("failure") >= 1 })
	if !p.logged("configuration reload failed; the running configuration stays", map[string]string{"error": "sluice.yaml:15:12: rules[1].limit:"}) {
		t.Errorf("no log of the refused file with its line and field:\n%s", p.stderr())
	}
	if code, _ := request(t, p.url+"/k"); code != 429 {
		t.Errorf("/k after a refused reload: %d, want 429 (the old rule)", code)
	}
	if _, h := request(t, p.url+"/r"); h.Get("RateLimit-Policy") != `"r";q=5;w=3600` {
		t.Errorf("after a refused reload, RateLimit-Policy = %q, want the running limit of 5", h.Get("RateLimit-Policy"))
	}

	// A change of the file alone is noticed, and a changed listener is
	// reported as needing a restart while the rest applies.
	writeConfig(t, path, strings.Replace(cfg(7), "listen: 127.0.0.1:0", "listen: 127.0.0.1:1", 1))
	eventually(t, "the watcher's reload", func() bool { return reloads("success") >= 2 })
	if _, h := request(t, p.url+"/r"); h.Get("RateLimit-Policy") != `"r";q=7;w=3600` {
		t.Errorf("after the file changed, RateLimit-Policy = %q, want the new limit of 7", h.Get("RateLimit-Policy"))
	}
	if !p.logged("configuration reload: this setting needs a restart to change; keeping the running value", map[string]string{"setting": "server.listen"}) {
		t.Errorf("no WARN about the listener needing a restart:\n%s", p.stderr())
	}

	// Reloads under load lose no request and reset no counter.
	var failed, served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(p.url + "/busy")
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
				served.Add(1)
			}
		})
	}
	before := reloads("success")
	for i := range 5 {
		p.signal(t, syscall.SIGHUP)
		eventually(t, "a reload under load", func() bool { return reloads("success") >= before+i+1 })
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || served.Load() == 0 {
		t.Errorf("under reloads: %d of %d requests failed; want none", failed.Load(), served.Load())
	}
	if code, _ := request(t, p.url+"/k"); code != 429 {
		t.Errorf("/k after reloads under load: %d, want 429", code)
	}

	// SIGTERM stops it, and the end of the shutdown is logged.
	p.signal(t, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if !p.logged("sluice stopped", nil) {
		t.Errorf("no \"sluice stopped\" log:\n%s", p.stderr())
	}
}

func hashOf(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("sha256sum", path).Output()
	if err != nil {
		t.Skipf("sha256sum: %v", err)
	}
	return string(out[:16])
}
