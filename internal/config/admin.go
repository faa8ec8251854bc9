package config

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// Admin is the admin section: the admin API on the admin listener.
type Admin struct {
	// API turns on the admin API (look at and reset keys, per-client
	// overrides). Default false.
	API bool
	// TokenFile holds the bearer token the API requires (the file's
	// content, surrounding white space removed, at least MinTokenLen
	// bytes). Relative to the config file's directory. Required with API.
	TokenFile string
	// AllowRemote lets the API run on an admin listener that is not bound
	// to a loopback address. Default false.
	AllowRemote bool
	// ShowKeys shows keys as they are in the admin API's top and
	// dashboard even when store.redis.hash_keys hashes them. Default
	// false.
	ShowKeys bool
}

// MinTokenLen is the shortest admin token accepted, in bytes.
const MinTokenLen = 16

// adminFields are the fields of admin.
var adminFields = []string{"api", "token_file", "allow_remote", "show_keys"}

func (d *decoder) admin(n *yaml.Node, a *Admin) {
	d.fields(n, "admin", adminFields, func(key string, v *yaml.Node) {
		p := "admin." + key
		switch key {
		case "api", "allow_remote", "show_keys":
			b, ok := d.boolean(v, p)
			if !ok {
				return
			}
			switch key {
			case "api":
				a.API = b
			case "allow_remote":
				a.AllowRemote = b
			default:
				a.ShowKeys = b
			}
		case "token_file":
			if s, ok := d.nonEmpty(v, p, "want the path of a file holding the token"); ok {
				a.TokenFile = s
			}
		}
	})
}

// checkAdmin checks the admin section against the server section: the API
// needs a token file and the admin listener, and that listener must be on
// loopback unless allow_remote says otherwise.
func (d *decoder) checkAdmin(n *yaml.Node, c *Config) {
	if !c.Admin.API {
		return
	}
	if c.Admin.TokenFile == "" {
		d.add(n, "admin.token_file", "missing: the admin API needs a file holding its bearer token")
	}
	if c.Server.Admin == "" {
		d.add(n, "admin.api", "needs the admin listener, but server.admin is off")
		return
	}
	if err := CheckAdminListener(c.Server.Admin, c.Admin.AllowRemote); err != nil {
		d.add(n, "admin.api", "%s", err)
	}
}

// TokenPath returns the path of TokenFile, relative to the directory of
// the config file at configPath.
func (a Admin) TokenPath(configPath string) string {
	if filepath.IsAbs(a.TokenFile) {
		return a.TokenFile
	}
	return filepath.Join(filepath.Dir(configPath), a.TokenFile)
}

// Token reads the admin token from TokenFile (see TokenPath).
func (a Admin) Token(configPath string) ([]byte, error) {
	path := a.TokenPath(configPath)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: admin.token_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, fmt.Errorf("config: admin.token_file: reading %s: %w", path, err)
	}
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 4096:
		return nil, fmt.Errorf("config: admin.token_file: %s is larger than 4096 bytes", path)
	case len(b) < MinTokenLen:
		return nil, fmt.Errorf("config: admin.token_file: the token in %s is %d bytes; want at least %d (such as the output of: openssl rand -hex 32)", path, len(b), MinTokenLen)
	}
	return b, nil
}
