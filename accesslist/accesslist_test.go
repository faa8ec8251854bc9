package accesslist

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func set(t *testing.T, nets ...string) *IPSet {
	t.Helper()
	var ps []netip.Prefix
	for _, n := range nets {
		p, err := ParseNetwork(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	s, err := NewIPSet(ps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIPSetContains(t *testing.T) {
	tests := []struct {
		name string
		nets []string
		in   []string
		out  []string
	}{
		{"host /32", []string{"192.0.2.7/32"}, []string{"192.0.2.7", "::ffff:192.0.2.7"}, []string{"192.0.2.6", "192.0.2.8", "::c000:207"}},
		{"bare address", []string{"192.0.2.7", "2001:db8::1"}, []string{"192.0.2.7", "2001:db8::1"}, []string{"2001:db8::2", "192.0.2.8"}},
		{"host /128", []string{"2001:db8::1/128"}, []string{"2001:db8::1"}, []string{"2001:db8::", "2001:db8::2"}},
		{"v4 /0", []string{"0.0.0.0/0"}, []string{"0.0.0.0", "255.255.255.255", "::ffff:10.0.0.1"}, []string{"::1", "2001:db8::1"}},
		{"v6 /0", []string{"::/0"}, []string{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::1"}, []string{"10.0.0.1", "::ffff:10.0.0.1"}},
		{"mapped network is v4", []string{"::ffff:10.0.0.0/104"}, []string{"10.1.2.3", "::ffff:10.255.255.255"}, []string{"11.0.0.0", "::a00:1"}},
		{"overlapping", []string{"10.0.0.0/8", "10.1.0.0/16", "10.255.255.0/24", "9.255.255.255/32"}, []string{"9.255.255.255", "10.0.0.0", "10.1.2.3", "10.255.255.255"}, []string{"9.255.255.254", "11.0.0.0"}},
		{"adjacent merged", []string{"10.0.0.0/25", "10.0.0.128/25", "10.0.2.0/24"}, []string{"10.0.0.0", "10.0.0.127", "10.0.0.128", "10.0.0.255", "10.0.2.9"}, []string{"10.0.1.0", "10.0.3.0"}},
		{"v6 overlapping", []string{"2001:db8::/32", "2001:db8:1::/48", "2001:db9::/64"}, []string{"2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::5"}, []string{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9:0:1::"}},
		{"v6 /64 and /65 boundaries", []string{"2001:db8:0:1::/64", "2001:db8:0:2:8000::/65"}, []string{"2001:db8:0:1:ffff:ffff:ffff:ffff", "2001:db8:0:2:8000::"}, []string{"2001:db8:0:2:7fff:ffff:ffff:ffff", "2001:db8:0:3::"}},
		{"top of the space", []string{"255.255.255.255/32", "ffff::/16", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"}, []string{"255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, []string{"255.255.255.254", "fffe::"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := set(t, tt.nets...)
			for _, a := range tt.in {
				if !s.Contains(netip.MustParseAddr(a)) {
					t.Errorf("Contains(%s) = false, want true", a)
				}
			}
			for _, a := range tt.out {
				if s.Contains(netip.MustParseAddr(a)) {
					t.Errorf("Contains(%s) = true, want false", a)
				}
			}
		})
	}
	var nilSet *IPSet
	if nilSet.Contains(netip.MustParseAddr("10.0.0.1")) || set(t, "0.0.0.0/0").Contains(netip.Addr{}) {
		t.Error("a nil set or the zero address matched")
	}
}

func TestIPSetMerges(t *testing.T) {
	s := set(t, "10.0.0.0/8", "10.1.0.0/16", "10.0.0.0/25", "10.0.0.128/25", "11.0.0.0/8", "2001:db8::/33", "2001:db8:8000::/33")
	if got, want := s.Ranges(), 2; got != want {
		t.Errorf("Ranges() = %d, want %d (10/8+11/8, and the two /33s)", got, want)
	}
	if got, want := s.Len(), 7; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
}

func TestParseNetworkErrors(t *testing.T) {
	for _, s := range []string{"10.0.0.0/33", "10.1.0.0/8", "10.0.0", "fe80::1%eth0", "::/129", "example.com", "10.0.0.0/-1", ""} {
		if _, err := ParseNetwork(s); err == nil {
			t.Errorf("ParseNetwork(%q) = nil error, want one", s)
		}
	}
}

func TestParseFiles(t *testing.T) {
	s, err := ParseNetworks(strings.NewReader("# partners\n\n10.0.0.0/8 # office\n  2001:db8::/32\n192.0.2.1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Contains(netip.MustParseAddr("10.9.9.9")) || !s.Contains(netip.MustParseAddr("192.0.2.1")) || s.Contains(netip.MustParseAddr("192.0.2.2")) {
		t.Error("parsed set does not hold what the file lists")
	}
	_, err = ParseNetworks(strings.NewReader("10.0.0.0/8\nnot-an-ip\n\n10.1.0.0/8\n"))
	var pe *ParseError
	if !errors.As(err, &pe) || !errors.Is(err, ErrSyntax) {
		t.Fatalf("got %v, want a ParseError", err)
	}
	if len(pe.Problems) != 2 || pe.Problems[0].Line != 2 || pe.Problems[1].Line != 4 {
		t.Errorf("problems %+v, want lines 2 and 4", pe.Problems)
	}
	if _, err := ParseNetworks(strings.NewReader("# nothing\n\n")); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty file: got %v, want ErrEmpty", err)
	}
	ks, err := ParseKeys(strings.NewReader("# partners\nkey-1\n  key#2  \n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !ks.Contains("key-1") || !ks.Contains("key#2") || ks.Contains("# partners") || ks.Len() != 2 {
		t.Errorf("key set wrong: len %d", ks.Len())
	}
	_, err = ParseKeys(strings.NewReader("ok\nbad\x01key\n"))
	if !errors.As(err, &pe) || len(pe.Problems) != 1 || pe.Problems[0].Line != 2 {
		t.Errorf("got %v, want a problem on line 2", err)
	}
	_, err = ParseKeys(strings.NewReader("ok\n" + strings.Repeat("x", MaxLineLen+10) + "\n"))
	if !errors.As(err, &pe) || pe.Problems[0].Line != 2 {
		t.Errorf("long line: got %v, want a problem on line 2", err)
	}
}

// write100k writes a file of 100,000 entries produced by entry.
func write100k(t testing.TB, entry func(i int) string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "list")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "# generated")
	for i := range 100_000 {
		fmt.Fprintln(w, entry(i))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLarge(t *testing.T) {
	// Every other /24 of 10.0.0.0/8 and beyond, and one /64 per entry.
	path := write100k(t, func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("%d.%d.%d.0/24", 10+i>>16, i>>8&0xff, i&0xff)
		}
		return fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff)
	})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ParseNetworks(f)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 100_000 || s.Ranges() != 100_000 {
		t.Fatalf("Len %d, Ranges %d; want 100000 each", s.Len(), s.Ranges())
	}
	for _, c := range []struct {
		a    string
		want bool
	}{{"10.0.0.1", true}, {"10.0.1.1", false}, {"10.0.2.255", true}, {"2001:db8:0:1::9", true}, {"2001:db8:0:2::9", false}, {"2001:db8:1:869f::1", true}, {"9.255.255.255", false}} {
		if got := s.Contains(netip.MustParseAddr(c.a)); got != c.want {
			t.Errorf("Contains(%s) = %v, want %v", c.a, got, c.want)
		}
	}
	kp := write100k(t, func(i int) string { return fmt.Sprintf("key-%06d", i) })
	kf, err := os.Open(kp)
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	ks, err := ParseKeys(kf)
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 100_000 || !ks.Contains("key-099999") || ks.Contains("key-100000") {
		t.Errorf("key set of %d wrong", ks.Len())
	}
}

func FuzzParseNetworks(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8\n", "# c\n\n::/0\n", "::ffff:1.2.3.4/128 # x\n", "1.2.3.4/33\n", "fe80::1%eth0\n", "0.0.0.0/0\n255.255.255.255\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseNetworks(strings.NewReader(in))
		if err != nil {
			return
		}
		// Every listed network's first and last address is in the set.
		for _, line := range strings.Split(in, "\n") {
			line, _, _ = strings.Cut(line, "#")
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			p, err := ParseNetwork(line)
			if err != nil {
				t.Fatalf("parsed file, but line %q fails: %v", line, err)
			}
			if !s.Contains(p.Addr()) {
				t.Fatalf("set lacks %v from %q", p.Addr(), line)
			}
		}
	})
}

func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{"a\nb\n", "# c\n\n k \n", "\x00\n", "#\n#x\nx#\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseKeys(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, line := range strings.Split(in, "\n") {
			line = strings.TrimSpace(line)
			if line != "" && line[0] != '#' && !s.Contains(line) {
				t.Fatalf("set lacks %q", line)
			}
		}
	})
}

// BenchmarkContains looks up addresses and keys, half of them listed, in
// sets of 100,000 entries.
func BenchmarkContains(b *testing.B) {
	var ps []netip.Prefix
	var ks []string
	for i := range 100_000 {
		n := i * 2 // not adjacent: 100,000 ranges
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}), 32))
		ks = append(ks, fmt.Sprintf("key-%06d", i))
	}
	s, _ := NewIPSet(ps)
	k := NewKeySet(ks)
	addrs := make([]netip.Addr, 4096)
	keys := make([]string, 4096)
	for i := range addrs {
		n := i * 97 // a spread of listed and unlisted addresses
		addrs[i] = netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
		keys[i] = fmt.Sprintf("key-%06d", n)
	}
	b.Run("ip", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Contains(addrs[i&4095])
		}
	})
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k.Contains(keys[i&4095])
		}
	})
}

// A large KeySet's filter never turns away a key in the set, and lets
// through few that are not: the map decides those.
func TestKeySetFilter(t *testing.T) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("partner-%d", i)
	}
	s := NewKeySet(keys)
	if s.absent == nil {
		t.Fatal("a set of 100,000 keys has no filter")
	}
	for _, k := range keys {
		if !s.Contains(k) {
			t.Fatalf("%q: not found", k)
		}
	}
	passed := 0
	const tries = 100_000
	for i := range tries {
		k := fmt.Sprintf("client-%d", i)
		if s.absent.mayContain(k) {
			passed++
		}
		if s.Contains(k) {
			t.Fatalf("%q: found, but it is not in the set", k)
		}
	}
	// About 1% with 10 bits a key and 6 bits in a block; 3% would mean a
	// broken hash or layout.
	if rate := float64(passed) / tries; rate > 0.03 {
		t.Errorf("the filter let through %.2f%% of absent keys, want about 1%%", 100*rate)
	} else {
		t.Logf("the filter let through %.2f%% of absent keys", 100*rate)
	}
	if small := NewKeySet(keys[:10]); small.absent != nil || !small.Contains("partner-3") || small.Contains("partner-10") {
		t.Error("a small set: want no filter and exact answers")
	}
}

// TestIPSetMatchesPrefixes compares Contains, on sets small and large
// enough for the block index, with a check of every prefix, at random
// addresses and at the edges of every network.
func TestIPSetMatchesPrefixes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 64, 65, 200, 5000} {
		var ps []netip.Prefix
		for range n {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], rng.Uint32()>>rng.IntN(4)) // crowd some of them low
			ps = append(ps, netip.PrefixFrom(netip.AddrFrom4(b), 8+rng.IntN(25)).Masked())
		}
		s, err := NewIPSet(ps)
		if err != nil {
			t.Fatal(err)
		}
		if n > 8*v4Block && len(s.v4) > 8*v4Block && s.v4top == nil {
			t.Fatalf("%d networks: no block index", n)
		}
		want := func(a netip.Addr) bool {
			for _, p := range ps {
				if p.Contains(a) {
					return true
				}
			}
			return false
		}
		var probes []netip.Addr
		for range 2000 {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], rng.Uint32()>>rng.IntN(4))
			probes = append(probes, netip.AddrFrom4(b))
		}
		for _, p := range ps {
			lo := p.Addr()
			b := lo.As4()
			var hb [4]byte
			binary.BigEndian.PutUint32(hb[:], binary.BigEndian.Uint32(b[:])|uint32(uint64(1)<<(32-p.Bits())-1))
			hi := netip.AddrFrom4(hb)
			probes = append(probes, lo, lo.Prev(), hi, hi.Next())
		}
		for _, a := range probes {
			if !a.IsValid() {
				continue
			}
			if got := s.Contains(a); got != want(a) {
				t.Fatalf("%d networks: Contains(%v) = %v, want %v", n, a, got, !got)
			}
		}
	}
}
