package accesslist_test

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/accesslist"
)

func ExampleParseNetworks() {
	file := `# monitoring
192.0.2.10
198.51.100.0/24   # the partner's office
2001:db8:1::/48
`
	set, err := accesslist.ParseNetworks(strings.NewReader(file))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range []string{"198.51.100.7", "::ffff:192.0.2.10", "2001:db8:1:2::3", "192.0.2.11"} {
		fmt.Println(a, set.Contains(netip.MustParseAddr(a)))
	}
	_, err = accesslist.ParseNetworks(strings.NewReader("10.0.0.0/8\n10.0.0.0/33\n"))
	fmt.Println(err)
	// Output:
	// 198.51.100.7 true
	// ::ffff:192.0.2.10 true
	// 2001:db8:1:2::3 true
	// 192.0.2.11 false
	// line 2: "10.0.0.0/33" is not a CIDR such as 192.0.2.0/24 or 2001:db8::/32
}
