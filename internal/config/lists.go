package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/accesslist"
	"github.com/sluicehq/sluice/httplimit"
)

// listFields are the fields of one named list (lists.NAME).
var listFields = []string{"cidrs", "cidrs_file", "keys", "keys_file", "key"}

// listFile is a list whose entries are in a file, read by ParseFile.
type listFile struct {
	list  *httplimit.List
	path  string // as written in the config file
	field string // such as lists.partners.keys_file
	keys  bool
}

// lists decodes the lists section into d.listsByName, reading inline
// entries; the entries of cidrs_file and keys_file are read by ParseFile.
func (d *decoder) lists(n *yaml.Node, c *Config) {
	d.listsByName = map[string]*httplimit.List{}
	if n == nil {
		return
	}
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.add(n, "lists", "want a mapping from list name to { cidrs | cidrs_file | keys | keys_file, key }, got %s", found(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		name, path := kn.Value, "lists."+kn.Value
		if err := httplimit.CheckName("list", name); err != nil {
			d.add(kn, path, "%s", reason(err))
			continue
		}
		if _, dup := d.listsByName[name]; dup {
			d.add(kn, path, "appears twice")
			continue
		}
		li := &httplimit.List{Name: name}
		seen := map[string]*yaml.Node{}
		before := len(d.err.Problems)
		d.fields(v, path, listFields, func(key string, v *yaml.Node) {
			p := path + "." + key
			seen[key] = v
			switch key {
			case "cidrs":
				ss, ok := d.strings(v, p, false)
				if !ok {
					return
				}
				var ps []netip.Prefix
				for j, s := range ss {
					pf, err := accesslist.ParseNetwork(strings.TrimSpace(s))
					if err != nil {
						d.add(resolve(v).Content[j], fmt.Sprintf("%s[%d]", p, j), "%s", strings.TrimPrefix(err.Error(), "accesslist: "))
						continue
					}
					ps = append(ps, pf)
				}
				if len(ss) == 0 {
					d.add(v, p, "empty: a list needs at least one entry")
				}
				if set, err := accesslist.NewIPSet(ps); err == nil && len(ps) > 0 {
					li.Addrs = set
				}
			case "keys":
				ss, ok := d.strings(v, p, false)
				if !ok {
					return
				}
				for j, s := range ss {
					if err := accesslist.CheckKey(s); err != nil {
						d.add(resolve(v).Content[j], fmt.Sprintf("%s[%d]", p, j), "%s", strings.TrimPrefix(err.Error(), "accesslist: "))
					}
				}
				if len(ss) == 0 {
					d.add(v, p, "empty: a list needs at least one entry")
				}
				li.Keys = accesslist.NewKeySet(ss)
			case "cidrs_file", "keys_file":
				if s, ok := d.nonEmpty(v, p, "want the path of a file, got an empty string"); ok {
					c.listFiles = append(c.listFiles, listFile{list: li, path: s, field: p, keys: key == "keys_file"})
					// Empty until ParseFile reads the file.
					if key == "keys_file" {
						li.Keys = accesslist.NewKeySet(nil)
					} else {
						li.Addrs = new(accesslist.IPSet)
					}
				}
			case "key":
				if s, ok := d.str(v, p); ok {
					k, err := httplimit.ParseKeyPart(s)
					if err != nil {
						d.add(v, p, "%s", reason(err))
						return
					}
					if k.Source == httplimit.SourceJWT {
						d.add(v, p, "lists cannot be looked up by a token's claim yet; use a header set by a trusted layer")
						return
					}
					if k.Source == httplimit.SourceIP || k.Source == httplimit.SourceGlobal {
						d.add(v, p, "want the request attribute keys are looked up by, such as header:X-API-Key; %s is not one (list client addresses in cidrs)", s)
						return
					}
					li.Key = k
				}
			}
		})
		if resolve(v).Kind != yaml.MappingNode {
			continue
		}
		var given []string
		for _, f := range []string{"cidrs", "cidrs_file", "keys", "keys_file"} {
			if seen[f] != nil {
				given = append(given, f)
			}
		}
		isKeys := seen["keys"] != nil || seen["keys_file"] != nil
		switch {
		case len(given) == 0:
			d.add(v, path, "missing: want one of cidrs, cidrs_file, keys or keys_file")
		case len(given) > 1:
			d.add(seen[given[1]], path+"."+given[1], "a list takes one of cidrs, cidrs_file, keys and keys_file; this one also has %s", given[0])
		case !isKeys && seen["key"] != nil:
			d.add(seen["key"], path+".key", "only for keys and keys_file: a cidrs list matches the client's address, as the ip key part finds it")
		}
		if len(d.err.Problems) == before {
			d.listsByName[name] = li
		} else {
			d.listsByName[name] = nil // known, so that uses of it report nothing more
		}
	}
}

// listNames resolves a list of list names for the gateway, as in deny and
// rules[].allow.
func (d *decoder) listNames(v *yaml.Node, path string) []*httplimit.List {
	return d.namedLists(v, path, true)
}

// namedLists resolves a list of list names; with gateway set, for the
// gateway, which needs a key list's key (the rate-limit service looks keys
// up in descriptor entries instead).
func (d *decoder) namedLists(v *yaml.Node, path string, gateway bool) []*httplimit.List {
	ss, ok := d.strings(v, path, true)
	if !ok {
		return nil
	}
	if len(ss) == 0 {
		d.add(v, path, "empty: name at least one list, or leave the field out")
	}
	var out []*httplimit.List
	for j, s := range ss {
		at := resolve(v)
		if at.Kind == yaml.SequenceNode {
			at = at.Content[j]
		}
		li, known := d.listsByName[s]
		switch {
		case !known:
			names := make([]string, 0, len(d.listsByName))
			for n := range d.listsByName {
				names = append(names, n)
			}
			slices.Sort(names)
			if len(names) == 0 {
				d.add(at, fmt.Sprintf("%s[%d]", path, j), "unknown list %q: the file has no lists section", s)
			} else {
				d.add(at, fmt.Sprintf("%s[%d]", path, j), "unknown list %q (the lists are %s)", s, strings.Join(names, ", "))
			}
		case li != nil && gateway && li.Keys != nil && li.Key == (httplimit.KeyPart{}):
			d.add(at, fmt.Sprintf("%s[%d]", path, j), "list %q has keys but no key: give it key, the request attribute its keys are looked up by, such as header:X-API-Key", s)
		case li != nil && !slices.Contains(out, li):
			out = append(out, li)
		}
	}
	return out
}

// loadLists reads the entries of the lists kept in files, relative to the
// directory of configPath. A bad line is reported with the list file's
// name and line.
func loadLists(c *Config, configPath string) error {
	var errs []error
	for _, lf := range c.listFiles {
		p := relative(configPath, lf.path)
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: %s: %w", lf.field, err))
			continue
		}
		if lf.keys {
			var s *accesslist.KeySet
			if s, err = accesslist.ParseKeys(f); err == nil {
				lf.list.Keys = s
			}
		} else {
			var s *accesslist.IPSet
			if s, err = accesslist.ParseNetworks(f); err == nil {
				lf.list.Addrs = s
			}
		}
		f.Close()
		var pe *accesslist.ParseError
		switch {
		case err == nil:
		case errors.As(err, &pe):
			e := &Error{File: p}
			for _, lp := range pe.Problems {
				e.Problems = append(e.Problems, Problem{Line: lp.Line, Path: lf.field, Message: lp.Message})
			}
			errs = append(errs, e)
		case errors.Is(err, accesslist.ErrEmpty):
			errs = append(errs, &Error{File: p, Problems: []Problem{{Path: lf.field, Message: "the file lists nothing: a list needs at least one entry"}}})
		default:
			errs = append(errs, fmt.Errorf("config: %s: %s: %w", lf.field, p, err))
		}
	}
	return errors.Join(errs...)
}

// ListFiles returns the files the config's lists are read from, for a
// watcher to reload when one changes.
func (c *Config) ListFiles(configPath string) []string {
	out := make([]string, 0, len(c.listFiles))
	for _, lf := range c.listFiles {
		out = append(out, filepath.Clean(relative(configPath, lf.path)))
	}
	return out
}
