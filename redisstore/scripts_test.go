package redisstore_test

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Every script the store sends is assembled whole, its pieces and the
// script it wraps put in at their markers, and Redis compiles it: Lua 5.1
// refuses a function of more than 200 locals or a closure of more than 60
// upvalues, so a piece that grew past either fails here.
func TestScriptsAssembled(t *testing.T) {
	srv := redistest.Start(t)
	scripts := redisstore.Scripts()
	names := make([]string, 0, len(scripts))
	for name := range scripts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			src := scripts[name]
			if i := strings.Index(src, "--[["); i >= 0 {
				line := strings.Count(src[:i], "\n") + 1
				t.Errorf("line %d still holds a marker: %q", line, strings.SplitN(src[i:], "\n", 2)[0])
			}
			sum := sha1.Sum([]byte(src))
			if got, want := srv.Do(t, "SCRIPT", "LOAD", src), hex.EncodeToString(sum[:]); got != want {
				t.Errorf("SCRIPT LOAD: got %q, want the SHA %s", got, want)
			}
		})
	}
	if len(names) != 10 {
		t.Errorf("got %d scripts, want 10: %q", len(names), names)
	}
}

// Each routine of the scripts is written once, in one of the Lua sources
// (the scripts and the pieces they share): no two local functions have one
// name, and the call's clock and the keys' TTLs are reckoned in clock.lua
// alone.
func TestScriptRoutinesWrittenOnce(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Lua sources: %v", err)
	}
	def := regexp.MustCompile(`^\s*local\s+(?:function\s+([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*=\s*function\b)`)
	only := map[string]string{"redis.call('TIME')": "clock.lua", "math.ceil(": "clock.lua"}
	where := map[string]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			at := f + ":" + strconv.Itoa(i+1)
			if m := def.FindStringSubmatch(line); m != nil {
				name := m[1] + m[2]
				if first, ok := where[name]; ok {
					t.Errorf("%s defines %s again; %s defines it first", at, name, first)
				} else {
					where[name] = at
				}
			}
			code, _, _ := strings.Cut(line, "--")
			for text, home := range only {
				if f != home && strings.Contains(code, text) {
					t.Errorf("%s: %s, which only %s may hold", at, text, home)
				}
			}
		}
	}
	for _, name := range []string{"clock", "ttl", "divmod", "divCeil", "bdivmod", "bdivCeil", "debt", "bdebt", "saveBucket"} {
		if where[name] == "" {
			t.Errorf("no source defines %s", name)
		}
	}
}
