// Package kprobe asks a server whether it speaks Kafka, without a Kafka client: the library uses
// it to tell a port of another service from a broker that is down, and the neli command to fail
// fast on a mistyped --kafka.
package kprobe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// InTheClear reports whether a security.protocol value (nil when unset) talks to the broker
// without TLS, where an ApiVersions request can be sent as is.
func InTheClear(securityProtocol any) bool {
	switch strings.ToLower(fmt.Sprint(securityProtocol)) {
	case "<nil>", "plaintext", "sasl_plaintext":
		return true
	}
	return false
}

// Servers splits a bootstrap.servers list into host:port addresses, dropping any scheme
// (PLAINTEXT://host:port) and empty entries. A server named without a port gets 9092, as
// librdkafka gives it (rdkafka_broker.c, rd_kafka_brokers_add0: RD_KAFKA_PORT); Go's dialer would
// refuse it ("missing port in address").
func Servers(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s = s[strings.LastIndex(s, "/")+1:]; s != "" {
			out = append(out, withPort(s))
		}
	}
	return out
}

// DefaultPort is the port of a bootstrap server named without one.
const DefaultPort = "9092"

// withPort adds DefaultPort to a server that has none: a host name, an IPv4 address, a bracketed
// IPv6 address, or a bare IPv6 address (more than one colon and no brackets).
func withPort(s string) string {
	if _, _, err := net.SplitHostPort(s); err == nil {
		return s
	}
	host := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if strings.HasPrefix(s, "[") && !strings.HasSuffix(s, "]") {
		// "[::1]:" and the like: malformed, and left for the dialer to say so.
		return s
	}
	if strings.Count(host, ":") == 1 {
		// "host:" or "host:x": a port that does not parse is not ours to replace.
		return s
	}
	return net.JoinHostPort(host, DefaultPort)
}

// SpeaksKafka sends an ApiVersions request at version 0, which a Kafka broker answers before any
// authentication, and checks that the answer has a Kafka response's framing and correlation id.
// It returns nil for a Kafka answer and otherwise says what the server did instead. A server that
// accepted the connection and stays silent for the whole timeout counts as not Kafka, for the
// library and the neli command alike: a port of some other service may wait for ever for a request
// it understands, and librdkafka would retry it for ever, while a broker too swamped to answer
// ApiVersions within seconds could not keep a leader's lease either.
func SpeaksKafka(conn net.Conn, timeout time.Duration) error {
	const correlation = 0x676f6e65
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("goneli-probe")).AppendRequest(nil, req, correlation)
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(frame); err != nil {
		return fmt.Errorf("closed the connection before an ApiVersions request was sent: %v", err)
	}
	var head [8]byte
	if n, err := io.ReadFull(conn, head[:]); err != nil {
		var ne net.Error
		if n == 0 && errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("did not answer an ApiVersions request within %v", timeout)
		}
		return fmt.Errorf("closed the connection without answering an ApiVersions request (%q, %v)", head[:n], err)
	}
	size, id := binary.BigEndian.Uint32(head[:4]), binary.BigEndian.Uint32(head[4:])
	if size < 4 || size > 1<<20 || id != correlation {
		return fmt.Errorf("answered an ApiVersions request with %q, not a Kafka response", head[:])
	}
	return nil
}
