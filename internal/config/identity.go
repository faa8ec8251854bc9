package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/identity"
)

// identityFields are the fields of identity.
var identityFields = []string{"jwt"}

// jwtFields are the fields of identity.jwt.
var jwtFields = []string{"keys", "algorithms", "issuer", "audience", "leeway", "max_bad_signatures"}

// jwtKeyFields are the fields of one of identity.jwt.keys.
var jwtKeyFields = []string{"file", "kid"}

// JWT is identity.jwt: how the bearer tokens behind the jwt:CLAIM key
// parts are verified.
type JWT struct {
	// KeyFiles are the key files as written; ParseFile reads them into
	// Keys.
	KeyFiles []KeyFile
	// Keys are the verification keys, read by ParseFile.
	Keys       []identity.Key
	Algorithms []string
	Issuer     string
	Audience   string
	// Leeway is the clock skew allowed for exp, nbf and iat. Default 30s.
	Leeway time.Duration
	// MaxBadSignatures is how many failed signature checks a second one
	// client may cause (identity.Options.MaxBadSignatures); 0 turns the
	// bound off. Default 10.
	MaxBadSignatures int

	line, column int // of identity.jwt, for problems found reading the keys
}

// KeyFile is one of identity.jwt.keys.
type KeyFile struct {
	Path string // relative to the config file's directory unless absolute
	// KID is the kid of the keys of a PEM file, which has none of its
	// own; a JWKS names each key's.
	KID          string
	line, column int
}

// Options returns the options of the identity package for the section.
func (j *JWT) Options() identity.Options {
	bad := j.MaxBadSignatures
	if bad == 0 {
		bad = -1 // off
	}
	return identity.Options{Keys: j.Keys, Algorithms: j.Algorithms, Issuer: j.Issuer, Audience: j.Audience, Leeway: j.Leeway, MaxBadSignatures: bad}
}

func (d *decoder) identity(n *yaml.Node, c *Config) {
	d.fields(n, "identity", identityFields, func(key string, v *yaml.Node) {
		c.JWT = &JWT{Leeway: 30 * time.Second, MaxBadSignatures: 10, line: resolve(v).Line, column: resolve(v).Column}
		d.jwt(v, c.JWT)
	})
}

func (d *decoder) jwt(n *yaml.Node, j *JWT) {
	const path = "identity.jwt"
	seen := map[string]bool{}
	d.fields(n, path, jwtFields, func(key string, v *yaml.Node) {
		p := path + "." + key
		seen[key] = true
		switch key {
		case "keys":
			v = resolve(v)
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				d.add(v, p, "want a list of key files, such as [{file: keys.jwks}], got %s", found(v))
				return
			}
			for i, kn := range v.Content {
				kp := fmt.Sprintf("%s[%d]", p, i)
				kf := KeyFile{line: resolve(kn).Line, column: resolve(kn).Column}
				if resolve(kn).Kind == yaml.ScalarNode {
					kf.Path, _ = d.str(kn, kp)
				} else {
					d.fields(kn, kp, jwtKeyFields, func(key string, v *yaml.Node) {
						switch key {
						case "file":
							kf.Path, _ = d.str(v, kp+".file")
						case "kid":
							kf.KID, _ = d.str(v, kp+".kid")
						}
					})
				}
				if kf.Path == "" {
					d.add(kn, kp+".file", "missing: want the path of a JWKS or PEM file")
					continue
				}
				j.KeyFiles = append(j.KeyFiles, kf)
			}
		case "algorithms":
			ss, ok := d.strings(v, p, true)
			if !ok {
				return
			}
			known := identity.AlgorithmNames()
			for i, s := range ss {
				at := resolve(v)
				if at.Kind == yaml.SequenceNode {
					at = at.Content[i]
				}
				switch {
				case strings.EqualFold(s, "none"):
					d.add(at, fmt.Sprintf("%s[%d]", p, i), "none accepts unsigned tokens, which anyone can write; it is never allowed")
				case !slices.Contains(known, s):
					d.add(at, fmt.Sprintf("%s[%d]", p, i), "unknown algorithm %q (want %s)", s, strings.Join(known, ", "))
				case slices.Contains(j.Algorithms, s):
					d.add(at, fmt.Sprintf("%s[%d]", p, i), "%s appears twice", s)
				default:
					j.Algorithms = append(j.Algorithms, s)
				}
			}
			if len(ss) == 0 {
				d.add(v, p, "empty: want the algorithms the issuer signs with, such as [RS256]")
			}
		case "issuer":
			j.Issuer, _ = d.str(v, p)
		case "audience":
			j.Audience, _ = d.str(v, p)
		case "leeway":
			if t, ok := d.duration(v, p, 0, 5*time.Minute); ok {
				j.Leeway = t
			}
		case "max_bad_signatures":
			if k, ok := d.integer(v, p, 0, 1_000_000); ok {
				j.MaxBadSignatures = int(k)
			}
		}
	})
	for _, f := range []string{"keys", "algorithms"} {
		if !seen[f] && resolve(n).Kind == yaml.MappingNode {
			d.add(n, path+"."+f, "missing: identity.jwt needs keys (the files of the keys that sign the tokens) and algorithms")
		}
	}
}

// checkJWTParts reports jwt key parts used in rules and tiers when the
// file has no identity.jwt to verify the tokens with, and fills in
// tiers.client's default.
func (d *decoder) checkJWTParts(root *yaml.Node, c *Config) {
	t := &c.Limiter.Tiers
	if t.From.Source == httplimit.SourceJWT && t.Client == (httplimit.KeyPart{}) {
		t.Client = httplimit.JWT("sub")
	}
	if c.JWT != nil {
		return
	}
	const need = "%s needs identity.jwt: the keys and algorithms that verify the tokens"
	for _, fk := range []struct {
		f string
		k httplimit.KeyPart
	}{{"from", t.From}, {"client", t.Client}, {"anchor", t.Anchor}} {
		f, k := fk.f, fk.k
		if at := lookup(root, "tiers", f); at != nil && k.Source == httplimit.SourceJWT {
			d.add(at, "tiers."+f, need, k)
		}
	}
	if at := lookup(root, "priority", "from"); at != nil && c.Limiter.Priority.From.Source == httplimit.SourceJWT {
		d.add(at, "priority.from", need, c.Limiter.Priority.From)
	}
	rules := lookup(root, "rules")
	for i, r := range c.Limiter.Rules {
		for _, k := range r.Key {
			if k.Source == httplimit.SourceJWT {
				var at *yaml.Node
				if rules != nil && i < len(resolve(rules).Content) {
					at = lookup(resolve(rules).Content[i], "key")
				}
				d.add(at, fmt.Sprintf("rules[%d].key", i), need, k)
				break
			}
		}
	}
}

// loadJWTKeys reads the key files of identity.jwt and checks that the keys
// and algorithms work together, reporting problems at the lines of the
// config file that name them.
func loadJWTKeys(c *Config, path string) error {
	j := c.JWT
	if j == nil {
		return nil
	}
	e := &Error{File: path}
	j.Keys = nil
	for i, kf := range j.KeyFiles {
		p := fmt.Sprintf("identity.jwt.keys[%d]", i)
		data, err := readKeyFile(relative(path, kf.Path))
		if err == nil {
			var keys []identity.Key
			if keys, err = identity.ParseKeys(data, kf.KID); err == nil {
				j.Keys = append(j.Keys, keys...)
				continue
			}
		}
		e.Problems = append(e.Problems, Problem{Line: kf.line, Column: kf.column, Path: p, Message: fmt.Sprintf("%s: %s", kf.Path, strings.ReplaceAll(err.Error(), "identity: ", ""))})
	}
	if len(e.Problems) == 0 {
		if _, err := identity.New(j.Options()); err != nil {
			e.Problems = append(e.Problems, Problem{Line: j.line, Column: j.column, Path: "identity.jwt", Message: strings.ReplaceAll(err.Error(), "identity: ", "")})
		}
	}
	if len(e.Problems) > 0 {
		return e
	}
	return nil
}

func readKeyFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, identity.MaxKeyFileBytes+1))
}

// JWTKeyFiles returns the files identity.jwt's keys are read from, for a
// watcher to reload when one changes (a key rotated).
func (c *Config) JWTKeyFiles(configPath string) []string {
	if c.JWT == nil {
		return nil
	}
	out := make([]string, 0, len(c.JWT.KeyFiles))
	for _, kf := range c.JWT.KeyFiles {
		out = append(out, filepath.Clean(relative(configPath, kf.Path)))
	}
	return out
}
