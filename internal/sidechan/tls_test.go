package sidechan

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/testkit"
)

// With ssl.endpoint.identification.algorithm=none, the chain is verified and the name is not, as
// librdkafka does; a chain from another authority fails as Go's own verification fails, so that it
// makes the connection give way to librdkafka alike.
func TestVerifyChainWithoutName(t *testing.T) {
	p, other := testkit.NewPKI(t, "some-other-host"), testkit.NewPKI(t, "x")
	roots := x509.NewCertPool()
	roots.AddCert(p.CA)
	leaf := func(p testkit.PKI) []*x509.Certificate {
		c, err := x509.ParseCertificate(p.Server.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return []*x509.Certificate{c}
	}
	if err := verifyChain(tls.ConnectionState{PeerCertificates: leaf(p)}, roots); err != nil {
		t.Fatalf("a chain of a trusted authority: %v", err)
	}
	err := verifyChain(tls.ConnectionState{PeerCertificates: leaf(other)}, roots)
	var refused *tls.CertificateVerificationError
	if !errors.As(err, &refused) {
		t.Fatalf("a chain of another authority: %v, want a *tls.CertificateVerificationError", err)
	}
}

// A TLS handshake that fails for what one end made of the other's messages makes the connection
// give way to librdkafka; one that fails because the connection closed, was reset or timed out
// does not, as a broker that restarts causes those.
func TestHandshakeRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"alert received", &net.OpError{Op: "remote error", Err: errors.New("tls: handshake failure")}, true},
		{"alert sent", &net.OpError{Op: "local error", Err: errors.New("tls: bad certificate")}, true},
		{"certificate not parsed", errors.New("tls: failed to parse certificate from server: x509: negative serial number"), true},
		{"certificate not verified", &tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}, true},
		{"not TLS", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, true},
		{"closed", io.EOF, false},
		{"cut short", io.ErrUnexpectedEOF, false},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, false},
		{"timed out", context.DeadlineExceeded, false},
		{"cancelled", context.Canceled, false},
	} {
		if got := handshakeRefused(tc.err); got != tc.refused {
			t.Errorf("%s (%v): refused %v, want %v", tc.name, tc.err, got, tc.refused)
		}
	}
}

// The dialer over real connections: a server that closes each connection before the handshake
// leaves the connection to try again, and one that answers in the clear makes it give way.
func TestDialerGivesWayOnlyForTLS(t *testing.T) {
	serve := func(t *testing.T, answer []byte) string {
		return testkit.ListenLocal(t, func(c net.Conn) {
			// The hello is read first: a socket closed with data unread is reset, and the reset
			// could overtake the answer.
			_, _ = c.Read(make([]byte, 4096))
			if answer != nil {
				_, _ = c.Write(answer)
			}
		})
	}
	for _, tc := range []struct {
		name     string
		answer   []byte
		fallback bool
	}{
		{"closed", nil, false},
		{"in the clear", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serve(t, tc.answer)
			var fallbacks int
			c, err := New(map[string]kafka.ConfigValue{"bootstrap.servers": addr, "security.protocol": "SSL"},
				Options{Limit: time.Second, OnFallback: func(error) { fallbacks++ }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.dialer(time.Second)(context.Background(), "tcp", addr)
			if err == nil {
				t.Fatal("the dial succeeded")
			}
			if got := c.Fallback() != nil; got != tc.fallback || IsFallback(err) != tc.fallback || fallbacks != map[bool]int{false: 0, true: 1}[tc.fallback] {
				t.Errorf("dial: %v; gave way %v (%d calls), want %v", err, got, fallbacks, tc.fallback)
			}
		})
	}
}
