package sidechan

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"

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
