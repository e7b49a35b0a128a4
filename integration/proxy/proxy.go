package proxy

import "github.com/dbinformer/dbinformer/internal/testkit/proxy"

// Proxy is a TCP proxy in front of one server; see internal/testkit/proxy.
type Proxy = proxy.Proxy

// New starts a proxy on a loopback port that forwards to target.
func New(target string) (*Proxy, error) { return proxy.New(target) }
