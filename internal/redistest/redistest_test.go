package redistest

import (
	"bufio"
	"slices"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	cases := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"+OK\r\n", []string{"OK"}, ""},
		{":42\r\n", []string{"42"}, ""},
		{"$5\r\nhello\r\n", []string{"hello"}, ""},
		{"$0\r\n\r\n", []string{""}, ""},
		{"$-1\r\n", []string{""}, ""},
		{"*0\r\n", []string{}, ""},
		{"*2\r\n$1\r\na\r\n:7\r\n", []string{"a", "7"}, ""},
		{"*2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n", []string{"a", "b", ""}, ""},
		{"$6\r\nx\r\ny\r\nz\r\n", []string{"x\r\ny\r\n"}, ""},
		{"-ERR bad\r\n", nil, "ERR bad"},
	}
	for _, c := range cases {
		got, err := readReply(bufio.NewReader(strings.NewReader(c.in)), nil)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("readReply(%q): got error %v, want %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("readReply(%q): got %q, %v, want %q", c.in, got, err, c.want)
		}
	}
}

func TestSentinelReportsMaster(t *testing.T) {
	master := Start(t)
	s := StartSentinel(t, "m1", master)
	if got := s.DoList(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m1"); !slices.Equal(got, []string{"127.0.0.1", master.Addr[strings.LastIndexByte(master.Addr, ':')+1:]}) {
		t.Errorf("sentinel reports %q, want the master at %s", got, master.Addr)
	}
}
