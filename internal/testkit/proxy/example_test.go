package proxy_test

import (
	"fmt"
	"net"
	"time"

	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
)

// Example puts the proxy in front of a server and cuts the client off.
func Example() {
	server, _ := net.Listen("tcp", "127.0.0.1:0")
	defer server.Close()
	go func() {
		for {
			c, err := server.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	p, err := proxy.New(server.Addr().String())
	if err != nil {
		panic(err)
	}
	defer p.Close()
	c, _ := net.Dial("tcp", p.Addr()) // the client talks to p.Addr()
	defer c.Close()
	buf := []byte("x")
	_, _ = c.Write(buf)
	for p.Live() == 0 { // the proxy accepts asynchronously
		time.Sleep(time.Millisecond)
	}
	fmt.Println("cut:", p.Cut())
	// Output: cut: 1
}
