package kafkatest

import (
	"strings"
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
//
// It also learns the connection's user, for the checks that kfake does not make itself.
func (k *Kafka) authenticate(x *exchange) ([]byte, bool) {
	switch req := x.request().(type) {
	case *kmsg.SASLHandshakeRequest:
		x.c.reauthenticating = !x.c.sessionEnd.IsZero()
		x.c.mechanism = req.Mechanism
	case *kmsg.SASLAuthenticateRequest:
		if !x.c.reauthenticating && x.c.sessionExpired() {
			return nil, false
		}
		if u, ok := saslUser(x.c.mechanism, req.SASLAuthBytes); ok {
			x.c.user = u
		}
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

// saslUser is the user that a PLAIN message, or a SCRAM client-first message, names.
func saslUser(mechanism string, msg []byte) (string, bool) {
	switch {
	case mechanism == "PLAIN":
		// authzid NUL authcid NUL password
		if parts := strings.SplitN(string(msg), "\x00", 3); len(parts) == 3 {
			return parts[1], true
		}
	case strings.HasPrefix(mechanism, "SCRAM-"):
		// gs2-header, then n=user,r=nonce; a later message has no n=.
		for _, f := range strings.Split(string(msg), ",") {
			if u, ok := strings.CutPrefix(f, "n="); ok {
				return strings.NewReplacer("=2C", ",", "=3D", "=").Replace(u), true
			}
		}
	}
	return "", false
}
