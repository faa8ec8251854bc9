package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// ErrAdminRemote reports an admin API that would be reachable from the
// network.
var ErrAdminRemote = errors.New("the admin API would be reachable from the network")

// CheckAdminListener returns an error wrapping ErrAdminRemote if the admin
// API cannot run on the admin listener at addr (host:port): unless
// allowRemote (admin.allow_remote), the listener must be bound to a
// loopback address (127.0.0.0/8, ::1 or localhost), since a bearer token
// alone should not guard an API that can reset any client's limits from
// anywhere. check-config applies it to the file, and the server to the
// listener it runs, which a reload cannot move.
func CheckAdminListener(addr string, allowRemote bool) error {
	if allowRemote || isLoopback(addr) {
		return nil
	}
	return fmt.Errorf("%w: the admin listener %s is not a loopback address: bind server.admin to 127.0.0.1 or [::1], or set admin.allow_remote: true and protect the port", ErrAdminRemote, addr)
}

func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
