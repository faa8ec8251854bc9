package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

const observeRule = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"

func TestAccessLogSection(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	file := observeRule + "log: {access: {output: logs/access.log, lines_per_second: 50, max_size: 8192, max_backups: 2, keys: raw}}\nadmin: {show_keys: true}\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := config.AccessLog{Output: filepath.Join(dir, "logs/access.log"), LinesPerSecond: 50, MaxSize: 8192, MaxBackups: 2, RawKeys: true}
	if c.AccessLog == nil || *c.AccessLog != want {
		t.Errorf("log.access = %+v, want %+v", c.AccessLog, want)
	}
	if !c.Admin.ShowKeys {
		t.Errorf("admin.show_keys was not read")
	}
	c, err = config.Parse([]byte(observeRule+"log: {access: {output: stdout}}\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := *c.AccessLog; got != (config.AccessLog{Output: "stdout", LinesPerSecond: 1000, MaxBackups: 5}) {
		t.Errorf("defaults: got %+v", got)
	}
	c, _ = config.Parse([]byte(observeRule), "x.yaml")
	if c.AccessLog != nil {
		t.Errorf("an access log without log.access: %+v", c.AccessLog)
	}

	for _, tc := range []struct{ name, file, want string }{
		{"no output", "log: {access: {lines_per_second: 5}}\n", "log.access.output: want stdout or the path of a file"},
		{"empty output", "log: {access: {output: ''}}\n", "log.access.output: want stdout or the path of a file"},
		{"bad keys", "log: {access: {output: stdout, keys: plain}}\n", `log.access.keys: "plain": want hash or raw`},
		{"tiny size", "log: {access: {output: stdout, max_size: 100}}\n", "log.access.max_size: want 0 (rotate only on SIGHUP) or at least 4096 bytes"},
		{"zero rate", "log: {access: {output: stdout, lines_per_second: 0}}\n", "log.access.lines_per_second"},
		{"unknown", "log: {access: {output: stdout, format: json}}\n", "log.access.format"},
	} {
		_, err := config.Parse([]byte(observeRule+tc.file), "broken.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem containing %q", tc.name, err, tc.want)
		}
	}
}

func TestTracingSection(t *testing.T) {
	c, err := config.Parse([]byte(observeRule+"tracing: {endpoint: 'http://127.0.0.1:4318', sample_ratio: 0.5, service_name: edge}\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Tracing{Endpoint: "http://127.0.0.1:4318", SampleRatio: 0.5, ServiceName: "edge"}); c.Tracing == nil || *c.Tracing != want {
		t.Errorf("tracing = %+v, want %+v", c.Tracing, want)
	}
	c, _ = config.Parse([]byte(observeRule+"tracing: {endpoint: 'https://otel:4318/custom'}\n"), "x.yaml")
	if want := (config.Tracing{Endpoint: "https://otel:4318/custom", SampleRatio: 0.01, ServiceName: "sluice"}); *c.Tracing != want {
		t.Errorf("defaults: got %+v, want %+v", *c.Tracing, want)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"no endpoint", "tracing: {sample_ratio: 1}\n", "tracing.endpoint: want the collector's URL"},
		{"bad endpoint", "tracing: {endpoint: '127.0.0.1:4318'}\n", "tracing.endpoint: want the collector's http:// or https:// URL"},
		{"ratio too big", "tracing: {endpoint: 'http://x:1', sample_ratio: 2}\n", "tracing.sample_ratio: want a number from 0 to 1"},
		{"ratio not a number", "tracing: {endpoint: 'http://x:1', sample_ratio: half}\n", "tracing.sample_ratio: want a number from 0 to 1"},
		{"empty name", "tracing: {endpoint: 'http://x:1', service_name: ''}\n", "tracing.service_name: want a name"},
	} {
		_, err := config.Parse([]byte(observeRule+tc.file), "broken.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a problem containing %q", tc.name, err, tc.want)
		}
	}
}
