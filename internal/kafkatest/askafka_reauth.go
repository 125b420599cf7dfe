package kafkatest

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// authenticate follows a connection's SASL session (KIP-368). kfake answers session_lifetime_ms
// from connections.max.reauth.ms and accepts a new handshake on an authenticated connection, but
// lets the session run on past its end. Kafka's SocketServer closes a connection whose session
// has ended on its next request unless that is a SaslHandshake starting re-authentication
// (core/src/main/scala/kafka/network/SocketServer.scala, processCompletedReceives, with
// KafkaChannel.serverAuthenticationSessionExpired and maybeBeginServerReauthentication in
// clients/src/main/java/org/apache/kafka/common/network/KafkaChannel.java).
func (k *Kafka) authenticate(x *exchange) ([]byte, bool) {
	if x.key == int16(kmsg.SASLHandshake) {
		x.c.reauthenticating = !x.c.sessionEnd.IsZero()
	} else if !x.c.reauthenticating && x.c.sessionExpired() {
		return nil, false
	}
	return x.patched(func(_ kmsg.Request, resp kmsg.Response) bool {
		r, ok := resp.(*kmsg.SASLAuthenticateResponse)
		if !ok || r.ErrorCode != 0 || r.SessionLifetimeMillis <= 0 {
			return false
		}
		// SaslServerAuthenticator counts the lifetime from the end of the authentication.
		x.c.sessionEnd = time.Now().Add(time.Duration(r.SessionLifetimeMillis) * time.Millisecond)
		x.c.reauthenticating = false
		return false
	})
}

// sessionExpired tells whether the connection's SASL session has ended. The caller holds turn.
func (c *kconn) sessionExpired() bool {
	return !c.sessionEnd.IsZero() && time.Now().After(c.sessionEnd)
}
