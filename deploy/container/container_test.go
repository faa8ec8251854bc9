// Package container_test builds the container image with podman, checks
// what is in it, and runs it where podman can run containers.
package container_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	// The image's binary is built from this package: a change to it
	// must rerun the test, whose result go test caches by its own
	// binary and the files it reads (see readInputs).
	_ "github.com/sluicehq/sluice/internal/cli"
)

// maxImageSize bounds the image: the binary (about 30 MB) and a few files.
// An image that grew a base distribution or a second binary fails.
const maxImageSize = 40 << 20

// podman runs podman with args and returns its standard output; the error
// carries its standard error.
func podman(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "podman", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func mustPodman(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := podman(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requirePodman skips the test without podman, unless SLUICE_REQUIRE_PODMAN
// is 1 (as in CI), when its absence fails the test.
func requirePodman(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("SLUICE_REQUIRE_PODMAN") == "1" {
			t.Fatal("podman is not installed, and SLUICE_REQUIRE_PODMAN=1")
		}
		t.Skip("podman is not installed (Debian's package podman; set SLUICE_REQUIRE_PODMAN=1 to fail instead)")
	}
}

// buildImage builds the image with deploy/container/build.sh under a name
// of its own, removed when the test ends.
func buildImage(t *testing.T) string {
	t.Helper()
	suffix := make([]byte, 6)
	rand.Read(suffix)
	name := "localhost/sluice-test:" + hex.EncodeToString(suffix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "build.sh", name)
	cmd.Env = append(os.Environ(), "CONTAINER_TOOL=podman")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		podman(ctx, "rmi", "--force", name)
	})
	if last := lastLine(string(out)); last != name {
		t.Fatalf("build.sh's last line is %q, want the image's name %s", last, name)
	}
	return name
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// git runs git at the repository's root.
func git(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", "../.."}, args...)...).Output()
	if err != nil {
		t.Skipf("git %v: %v (the image's labels are compared with the checkout)", args, err)
	}
	return strings.TrimSpace(string(out))
}

// imageConfig is the part of podman image inspect that the test reads.
type imageConfig struct {
	Size   int64
	Os     string
	Config struct {
		User         string
		Entrypoint   []string
		Cmd          []string
		StopSignal   string
		ExposedPorts map[string]struct{}
		Labels       map[string]string
		Env          []string
	}
}

// layerFiles reads the image's single layer (podman image save) and
// returns the mode of every entry and the content of the files named in
// want.
func layerFiles(t *testing.T, image string, want ...string) (modes map[string]*tar.Header, content map[string][]byte) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "image.tar")
	mustPodman(t, "image", "save", "--format", "docker-archive", "-o", archive, image)
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The outer archive: manifest.json names the layers.
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v: %s", err, files["manifest.json"])
	}
	modes, content = map[string]*tar.Header{}, map[string][]byte{}
	for _, layer := range manifest[0].Layers {
		lr := tar.NewReader(bytes.NewReader(files[layer]))
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", layer, err)
			}
			name := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
			modes[name] = h
			for _, w := range want {
				if name == w {
					b, err := io.ReadAll(lr)
					if err != nil {
						t.Fatal(err)
					}
					content[name] = b
				}
			}
		}
	}
	return modes, content
}

// readInputs reads the files the image is built from besides the Go
// packages, so that go test reruns the test when one changes (it caches a
// result by the files the test itself reads, not those build.sh reads).
func readInputs(t *testing.T) {
	t.Helper()
	for _, f := range []string{"../../Containerfile", "build.sh", "sluice.yaml", "../../LICENSE", "../../NOTICE",
		"../../cmd/sluice/main.go", "../../go.mod", "../../go.sum"} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImage builds the image and checks it: a non-root numeric user, the
// entrypoint and default config, the labels, its size, nothing in it but
// the binary, the CA certificates, the config and the licenses, and a
// static binary that runs when taken out of the image and reports this
// checkout's commit. Then it runs the image where podman can (see
// runContainer).
func TestImage(t *testing.T) {
	readInputs(t)
	requirePodman(t)
	head := git(t, "rev-parse", "HEAD")
	start := time.Now()
	image := buildImage(t)
	t.Logf("built %s in %v", image, time.Since(start).Round(time.Millisecond))

	var inspect []imageConfig
	if err := json.Unmarshal([]byte(mustPodman(t, "image", "inspect", image)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	img := inspect[0]
	if u := img.Config.User; !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(u) {
		t.Errorf("user %q, want a numeric non-root user and group, such as 65532:65532", u)
	}
	if got := strings.Join(img.Config.Entrypoint, " "); got != "/usr/local/bin/sluice" {
		t.Errorf("entrypoint %q, want /usr/local/bin/sluice", got)
	}
	if got := strings.Join(img.Config.Cmd, " "); got != "serve --config /etc/sluice/sluice.yaml" {
		t.Errorf("cmd %q, want serve --config /etc/sluice/sluice.yaml", got)
	}
	if img.Config.StopSignal != "SIGTERM" {
		t.Errorf("stop signal %q, want SIGTERM", img.Config.StopSignal)
	}
	for _, p := range []string{"8080/tcp", "9090/tcp"} {
		if _, ok := img.Config.ExposedPorts[p]; !ok {
			t.Errorf("port %s is not exposed: %v", p, img.Config.ExposedPorts)
		}
	}
	if img.Size <= 0 || img.Size > maxImageSize {
		t.Errorf("image size %d bytes, want at most %d", img.Size, maxImageSize)
	}
	labels := img.Config.Labels
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/sluicehq/sluice",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.revision": head,
		"org.opencontainers.image.title":    "Sluice",
	} {
		if labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, labels[k], want)
		}
	}
	if labels["org.opencontainers.image.version"] == "" {
		t.Error("no label org.opencontainers.image.version")
	}

	// The files: nothing but these, owned by root and read-only to the
	// user the image runs as.
	const bin, cfg = "/usr/local/bin/sluice", "/etc/sluice/sluice.yaml"
	modes, content := layerFiles(t, image, bin, cfg)
	allowed := regexp.MustCompile(`^(/usr/local/bin/sluice|/etc/ssl/certs/ca-certificates\.crt|/etc/sluice/sluice\.yaml|/usr/share/doc/sluice/(LICENSE|NOTICE|licenses/.+))$`)
	var licenses int
	for name, h := range modes {
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if !allowed.MatchString(name) || h.Typeflag != tar.TypeReg {
			t.Errorf("the image has %s (type %c), which is not the binary, the CA certificates, the config or a license", name, h.Typeflag)
		}
		if h.Uid != 0 || h.Mode&0o222 != 0 {
			t.Errorf("%s: owner %d, mode %o; want root's and read-only", name, h.Uid, h.Mode)
		}
		if strings.HasPrefix(name, "/usr/share/doc/sluice/licenses/") {
			licenses++
		}
	}
	for _, f := range []string{bin, cfg, "/etc/ssl/certs/ca-certificates.crt", "/usr/share/doc/sluice/LICENSE", "/usr/share/doc/sluice/NOTICE",
		"/usr/share/doc/sluice/licenses/go/LICENSE", "/usr/share/doc/sluice/licenses/google.golang.org/grpc/LICENSE"} {
		if modes[f] == nil {
			t.Errorf("the image lacks %s", f)
		}
	}
	if modes[bin] != nil && modes[bin].Mode&0o111 != 0o111 {
		t.Errorf("%s: mode %o, want executable by all", bin, modes[bin].Mode)
	}

	// The binary, taken out of the image: static, and it runs.
	dir := t.TempDir()
	exe := filepath.Join(dir, "sluice")
	if err := os.WriteFile(exe, content[bin], 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatalf("the image's binary: %v", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the image's binary is dynamically linked (program header %v)", p.Type)
		}
	}
	ef.Close()
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("the image's sluice --version: %v\n%s", err, out)
	}
	version := string(out)
	if first := strings.SplitN(version, "\n", 2)[0]; first != "sluice "+labels["org.opencontainers.image.version"] {
		t.Errorf("the binary says %q; the label org.opencontainers.image.version says %q", first, labels["org.opencontainers.image.version"])
	}
	if m := regexp.MustCompile(`(?m)^commit: +([0-9a-f]{40})$`).FindStringSubmatch(version); m != nil && m[1] != head {
		t.Errorf("the binary was built from commit %s, want %s", m[1], head)
	} else if m == nil {
		// A git worktree's builds record no commit (see cmd/sluice's
		// TestVersionOfABuild); a clone's always do.
		t.Logf("the binary records no commit:\n%s", version)
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(version, "go:        "+strings.TrimSpace(string(goVersion))+" linux/") {
		t.Errorf("the binary's version does not name %s for linux:\n%s", goVersion, version)
	}
	// The default config is valid for the binary beside it.
	if err := os.WriteFile(filepath.Join(dir, "sluice.yaml"), content[cfg], 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(exe, "check-config", filepath.Join(dir, "sluice.yaml")).CombinedOutput(); err != nil {
		t.Errorf("the image's config fails check-config: %v\n%s", err, out)
	}
	if !strings.Contains(string(content[cfg]), "listen: 0.0.0.0:8080") || !strings.Contains(string(content[cfg]), "admin: 0.0.0.0:9090") {
		t.Errorf("the image's config does not listen on 0.0.0.0:8080 and 0.0.0.0:9090:\n%s", content[cfg])
	}

	t.Run("run", func(t *testing.T) { runContainer(t, image) })
}

// runOptions finds podman options under which a container starts here. On
// some machines podman's runtime cannot set the containers' resource
// limits ("crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted": the
// host withholds CAP_SYS_RESOURCE, so no limit can be raised) or crun
// refuses the host's cgroup layout ("cgroups in hybrid mode not
// supported"). It tries, in order: podman's defaults; --ulimit host (the
// host's own limits); limits below the host's (4096 files and processes),
// which need no privilege; and each of these again with runc where it is
// installed. It skips the test, with every error, when none starts for
// one of those reasons, and fails on any other error.
func runOptions(t *testing.T, image string) []string {
	t.Helper()
	low := []string{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}
	tries := [][]string{nil, {"--ulimit", "host"}, low}
	if hasRunc() {
		for _, o := range [][]string{nil, {"--ulimit", "host"}, low} {
			tries = append(tries, append([]string{"--runtime", "runc"}, o...))
		}
	}
	known := regexp.MustCompile(`setrlimit|rlimit|cgroups in hybrid mode`)
	var failures []string
	for _, opts := range tries {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		// --runtime is a global option: it goes before run.
		args := []string{}
		rest := opts
		if len(opts) >= 2 && opts[0] == "--runtime" {
			args, rest = opts[:2], opts[2:]
		}
		args = append(append(append([]string{}, args...), "run", "--rm"), rest...)
		out, err := podman(ctx, append(args, image, "--version")...)
		cancel()
		if err == nil && strings.HasPrefix(out, "sluice ") {
			t.Logf("containers start with podman options %q", opts)
			return opts
		}
		if err == nil {
			t.Fatalf("podman %q: sluice --version printed %q", args, out)
		}
		if !known.MatchString(err.Error()) {
			t.Fatalf("the container does not start: %v", err)
		}
		failures = append(failures, fmt.Sprintf("with %q: %v", opts, err))
	}
	t.Skipf("podman cannot run containers on this machine (resource limits or cgroups); tried:\n%s", strings.Join(failures, "\n"))
	return nil
}

// hasRunc reports whether runc is installed (Debian puts it in /usr/sbin,
// which is not on every PATH; podman finds it there).
func hasRunc() bool {
	if _, err := exec.LookPath("runc"); err == nil {
		return true
	}
	_, err := os.Stat("/usr/sbin/runc")
	return err == nil
}

// runContainer runs the image on a config directory laid out as Kubernetes
// mounts a ConfigMap, publishes its ports on loopback, and checks that
// the gateway answers through the published port, that the kubelet's
// symlink swap and a plain replacement of the file each reload it, and
// that podman stop drains: a request in flight when the stop begins is
// answered, and sluice exits 0.
func runContainer(t *testing.T, image string) {
	opts := runOptions(t, image)
	global, runOpts := []string{}, opts
	if len(opts) >= 2 && opts[0] == "--runtime" {
		global, runOpts = opts[:2], opts[2:]
	}

	// The kubelet's layout: sluice.yaml -> ..data/sluice.yaml, and
	// ..data -> ..<timestamp>, the directory of the current version.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // the container's user reads it
		t.Fatal(err)
	}
	config := func(limit int) string {
		return fmt.Sprintf(`server:
  listen: 0.0.0.0:8080
  admin: 0.0.0.0:9090
  shutdown_timeout: 20s
upstream: builtin:echo
rules:
  - name: r
    match: { path: /* }
    algorithm: fixed_window
    limit: %d
    period: 1h
`, limit)
	}
	version := 0
	configMapUpdate := func(limit int) {
		version++
		v := fmt.Sprintf("..2026_11_26_00_00_0%d.000000001", version)
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, v, "sluice.yaml"), []byte(config(limit)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(v, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	configMapUpdate(1000)
	if err := os.Symlink("..data/sluice.yaml", filepath.Join(dir, "sluice.yaml")); err != nil {
		t.Fatal(err)
	}

	name := "sluice-test-" + filepath.Base(image[strings.LastIndex(image, ":")+1:])
	args := append(append(append([]string{}, global...), "run", "--detach", "--name", name,
		"--publish", "127.0.0.1::8080", "--publish", "127.0.0.1::9090",
		"--volume", dir+":/etc/sluice:ro"), runOpts...)
	mustPodman(t, append(args, image)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		podman(ctx, "rm", "--force", "--time", "0", name)
	})
	logs := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, "podman", "logs", name).CombinedOutput()
		return string(out)
	}
	port := func(p string) string {
		addr := strings.TrimSpace(mustPodman(t, "port", name, p+"/tcp"))
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("port %s is published at %q, want a loopback address", p, addr)
		}
		return addr
	}
	gateway, admin := "http://"+port("8080"), "http://"+port("9090")

	eventually(t, "the container's /readyz answering 200", func() bool {
		resp, err := http.Get(admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, logs)
	policy := func() string {
		resp, err := http.Get(gateway + "/r")
		if err != nil {
			t.Fatalf("GET /r through the published port: %v\n%s", err, logs())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /r: %d, want 200", resp.StatusCode)
		}
		return resp.Header.Get("RateLimit-Policy")
	}
	if got := policy(); got != `"r";q=1000;w=3600` {
		t.Fatalf("RateLimit-Policy %q, want the mounted config's limit of 1000", got)
	}

	// The kubelet's update: a new version directory and ..data swapped.
	configMapUpdate(2000)
	eventually(t, "the ConfigMap swap reloading the config", func() bool { return policy() == `"r";q=2000;w=3600` }, logs)
	// A plain replacement of the file, as an editor or a config tool
	// makes it: a new file renamed over the old.
	tmp := filepath.Join(dir, "sluice.yaml.new")
	if err := os.WriteFile(tmp, []byte(config(3000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "sluice.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the replaced file reloading the config", func() bool { return policy() == `"r";q=3000;w=3600` }, logs)

	// podman stop drains. A request whose body is still arriving is in
	// flight: the gateway has asked for the body (100 Continue).
	conn, err := net.Dial("tcp", strings.TrimPrefix(gateway, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /r HTTP/1.1\r\nHost: sluice\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(conn)
	conn.SetDeadline(time.Now().Add(time.Minute))
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("before the body: %q, %v; want HTTP/1.1 100 Continue", line, err)
	}
	br.ReadString('\n') // the blank line after it
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := podman(ctx, append(append([]string{}, global...), "stop", "--time", "30", name)...)
		stopped <- err
	}()
	eventually(t, "sluice shutting down after podman stop", func() bool { return strings.Contains(logs(), "sluice shutting down") }, logs)
	io.WriteString(conn, "0123456789")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the request in flight during the stop: %v\n%s", err, logs())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"body_bytes": 10`) {
		t.Errorf("the request in flight during the stop: %d %s; want 200 and its 10 bytes echoed", resp.StatusCode, body)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if code := strings.TrimSpace(mustPodman(t, "inspect", "--format", "{{.State.ExitCode}}", name)); code != "0" {
		t.Errorf("exit code %s after podman stop, want 0 (a drain, not a kill):\n%s", code, logs())
	}
	if !strings.Contains(logs(), "sluice stopped") {
		t.Errorf("no \"sluice stopped\" in the logs:\n%s", logs())
	}
}

// eventually polls cond until it holds, failing t with the container's
// logs after 30 s.
func eventually(t *testing.T, what string, cond func() bool, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s\n%s", what, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
