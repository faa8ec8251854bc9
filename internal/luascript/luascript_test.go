package luascript_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/sluicehq/sluice/internal/luascript"
)

func TestAssemble(t *testing.T) {
	fsys := fstest.MapFS{
		"main.lua":    {Data: []byte("--[[a.lua]]\nlocal x = f()\nif x then\n  --[[b.lua]]\nend\nreturn x")},
		"a.lua":       {Data: []byte("-- a\n--[[b.lua]]\nlocal function f() return g() end\n")},
		"b.lua":       {Data: []byte("local function g() return 1 end")},
		"wrap.lua":    {Data: []byte("local r = (function()\n--[[decide]]\nend)()\nreturn r\n")},
		"self.lua":    {Data: []byte("--[[loop.lua]]\n")},
		"loop.lua":    {Data: []byte("--[[self.lua]]\n")},
		"missing.lua": {Data: []byte("--[[nowhere.lua]]\n")},
		"odd.lua":     {Data: []byte("--[[ a comment ]]\n")},
	}
	for _, c := range []struct {
		name, decide string
		want         string // or, with err, the error's text
		err          bool
	}{
		{name: "main.lua", want: "-- a\nlocal function g() return 1 end\nlocal function f() return g() end\nlocal x = f()\nif x then\nlocal function g() return 1 end\nend\nreturn x\n"},
		{name: "wrap.lua", decide: "return 2", want: "local r = (function()\nreturn 2\nend)()\nreturn r\n"},
		{name: "wrap.lua", err: true, want: "wrap.lua: no script to put at --[[decide]]"},
		{name: "self.lua", err: true, want: "self.lua includes itself: self.lua > loop.lua > self.lua"},
		{name: "missing.lua", err: true, want: "nowhere.lua"},
		{name: "odd.lua", err: true, want: "odd.lua: nothing to put at --[[ a comment ]]"},
	} {
		got, err := luascript.Assemble(fsys, c.name, c.decide)
		switch {
		case c.err && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Assemble(%s): got %q, %v; want an error saying %q", c.name, got, err, c.want)
		case !c.err && (err != nil || got != c.want):
			t.Errorf("Assemble(%s, %q): got %q, %v; want %q", c.name, c.decide, got, err, c.want)
		}
	}
}
