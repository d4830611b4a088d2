package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// checkAPIAddr accepts what the client can call: HOST:PORT, or
// http://HOST:PORT with an optional trailing slash. Anything else is a usage
// error that says so, rather than a dial error about a malformed address.
func checkAPIAddr(addr string) error {
	bad := func(why string) error {
		return usageError{fmt.Sprintf("--api %q is malformed: %s (want HOST:PORT, such as 127.0.0.1:7433, or http://HOST:PORT)", addr, why)}
	}
	hostport, hadScheme := strings.CutPrefix(addr, "http://")
	if hadScheme {
		hostport = strings.TrimSuffix(hostport, "/")
	} else if i := strings.Index(addr, "://"); i >= 0 {
		return bad(fmt.Sprintf("scheme %q is not supported", addr[:i]))
	}
	if strings.ContainsAny(hostport, "/?#@ ") {
		return bad("no path, query, user or spaces allowed")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return bad("no port")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return bad(fmt.Sprintf("port %q is not a number in 1..65535", port))
	}
	if host == "" {
		return bad("no host")
	}
	return nil
}
