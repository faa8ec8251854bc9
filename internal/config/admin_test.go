package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

const adminBase = "upstream: builtin:echo\nrules: [{name: a, algorithm: gcra, limit: 1, period: 1s}]\n"

func TestAdminSection(t *testing.T) {
	c, err := config.Parse([]byte(adminBase+"admin: {api: true, token_file: tok}\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Admin.API || c.Admin.TokenFile != "tok" || c.Admin.AllowRemote {
		t.Errorf("admin: got %+v", c.Admin)
	}
	c, err = config.Parse([]byte(adminBase), "f.yaml")
	if err != nil || c.Admin.API {
		t.Errorf("default: API %v, %v; want off", c.Admin.API, err)
	}
	for _, ok := range []string{
		"server: {admin: '[::1]:9090'}\nadmin: {api: true, token_file: t}\n",
		"server: {admin: 'localhost:9090'}\nadmin: {api: true, token_file: t}\n",
		"server: {admin: '0.0.0.0:9090'}\nadmin: {api: true, token_file: t, allow_remote: true}\n",
		"server: {admin: '0.0.0.0:9090'}\nadmin: {api: false}\n",
	} {
		if _, err := config.Parse([]byte(adminBase+ok), "f.yaml"); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"admin: {api: true}\n", "f.yaml:3:8: admin.token_file: missing"},
		{"admin: {api: true, token_file: ''}\n", "f.yaml:3:32: admin.token_file: want the path of a file holding the token"},
		{"server: {admin: '0.0.0.0:9090'}\nadmin: {api: true, token_file: t}\n", "f.yaml:4:8: admin.api: the admin API would be reachable from the network: the admin listener 0.0.0.0:9090 is not a loopback address"},
		{"server: {admin: ':9090'}\nadmin: {api: true, token_file: t}\n", "admin.api: the admin API would be reachable from the network: the admin listener :9090 is not a loopback address"},
		{"server: {admin: 'off'}\nadmin: {api: true, token_file: t}\n", "admin.api: needs the admin listener"},
		{"admin: {api: yes please}\n", "admin.api: want true or false"},
		{"admin: {apii: true}\n", `admin.apii: unknown field (did you mean "api"?)`},
	} {
		_, err := config.Parse([]byte(adminBase+c.yaml), "f.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}

func TestAdminToken(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tok"), []byte("  0123456789abcdef0123\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "short"), []byte("abc\n"), 0o600)
	cfg := filepath.Join(dir, "sluice.yaml")
	tok, err := config.Admin{TokenFile: "tok"}.Token(cfg)
	if err != nil || string(tok) != "0123456789abcdef0123" {
		t.Errorf("relative token file: %q, %v", tok, err)
	}
	if _, err := (config.Admin{TokenFile: filepath.Join(dir, "tok")}).Token("/elsewhere/sluice.yaml"); err != nil {
		t.Errorf("absolute token file: %v", err)
	}
	for _, f := range []string{"short", "missing"} {
		if _, err := (config.Admin{TokenFile: f}).Token(cfg); err == nil || !strings.HasPrefix(err.Error(), "config: admin.token_file: ") {
			t.Errorf("token file %s: got %v, want an admin.token_file error", f, err)
		}
	}
}
