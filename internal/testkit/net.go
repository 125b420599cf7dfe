package testkit

import (
	"net"
	"testing"
)

// HTTPServer answers every connection as a web server answers a request it cannot parse.
func HTTPServer(c net.Conn) {
	buf := make([]byte, 512)
	_, _ = c.Read(buf)
	_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
}

// SilentServer reads until the client hangs up and never answers.
func SilentServer(c net.Conn) {
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// FreePort returns a loopback address that nothing listens on.
func FreePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
