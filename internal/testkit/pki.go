package testkit

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a certificate authority and a server certificate it signed, for TLS listeners in tests.
type PKI struct {
	CA     *x509.Certificate
	Server tls.Certificate
	// CAFile holds the authority's certificate in PEM, as ssl.ca.location takes it.
	CAFile string
}

// ServerTLS is a server configuration with the PKI's server certificate.
func (p PKI) ServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Server}}
}

// RSAKeyExchangeOnly is a server configuration with the PKI's server certificate, which must have
// an RSA key (PKIOpts.RSA), that accepts TLS 1.2 with the TLS_RSA_* (RSA key exchange) cipher
// suites only: OpenSSL 3 (librdkafka) offers them by default, Go's crypto/tls does not since Go
// 1.22, so a Go client's handshake fails with a handshake_failure alert.
func (p PKI) RSAKeyExchangeOnly() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Server}, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{
		tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_256_CBC_SHA,
	}}
}

// PKIOpts change the server certificate that NewPKIOf makes.
type PKIOpts struct {
	// RSA gives the server a 2048-bit RSA key instead of an ECDSA P-256 one: the TLS_RSA_* suites
	// need one.
	RSA bool
	// NegativeSerial gives the server certificate a negative serial number, which OpenSSL accepts
	// and Go's crypto/x509 refuses to parse since Go 1.23 ("x509: negative serial number").
	NegativeSerial bool
}

// NewPKI makes a certificate authority and a server certificate for the host cn. With sans, the
// certificate names the server in subject alternative names too (DNS names, or IP addresses where
// they parse); without, it names it only in its subject's common name, which OpenSSL (librdkafka)
// matches against the host it connects to and Go's crypto/x509 does not.
func NewPKI(t testing.TB, cn string, sans ...string) PKI {
	t.Helper()
	return NewPKIOf(t, PKIOpts{}, cn, sans...)
}

// NewPKIOf is NewPKI with a server certificate changed as o says.
func NewPKIOf(t testing.TB, o PKIOpts, cn string, sans ...string) PKI {
	t.Helper()
	p, err := MakePKI(t.TempDir(), o, cn, sans...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// MakePKI is NewPKIOf for a caller that has no test: a harness whose broker outlives the test that
// started it (internal/realkafka's shared clusters) keeps the files in a directory of its own.
// CAFile is written in dir.
func MakePKI(dir string, o PKIOpts, cn string, sans ...string) (PKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PKI{}, err
	}
	var srvKey crypto.Signer
	if o.RSA {
		srvKey, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		srvKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return PKI{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "goneli test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return PKI{}, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, ip)
		} else {
			srvTmpl.DNSNames = append(srvTmpl.DNSNames, s)
		}
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, srvKey.Public(), caKey)
	if err != nil {
		return PKI{}, err
	}
	if o.NegativeSerial {
		if srvDER, err = negateSerial(srvDER, caKey); err != nil {
			return PKI{}, err
		}
	}
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		return PKI{}, err
	}
	return PKI{CA: ca, Server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}, CAFile: file}, nil
}

// ServerPEM is the server's key (PKCS #8, unencrypted) followed by its certificate, in PEM: the
// key store that a Java server reads with ssl.keystore.type=PEM (Apache Kafka's
// DefaultSslEngineFactory.PemStore takes only a "PRIVATE KEY" block).
func (p PKI) ServerPEM() ([]byte, error) {
	key, err := x509.MarshalPKCS8PrivateKey(p.Server.PrivateKey)
	if err != nil {
		return nil, err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})
	for _, der := range p.Server.Certificate {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return out, nil
}

// negateSerial re-signs der, a certificate that caKey signed with ECDSA and SHA-256, with its serial
// number negated: crypto/x509 refuses to make such a certificate, so its fields are rewritten here.
func negateSerial(der []byte, caKey *ecdsa.PrivateKey) ([]byte, error) {
	var cert struct {
		TBS       asn1.RawValue
		Algorithm asn1.RawValue
		Signature asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &cert); err != nil {
		return nil, err
	}
	// TBSCertificate: [0] version, serialNumber, signature, issuer, validity, subject, ...
	var fields []asn1.RawValue
	if _, err := asn1.Unmarshal(cert.TBS.FullBytes, &fields); err != nil {
		return nil, err
	}
	var serial *big.Int
	if _, err := asn1.Unmarshal(fields[1].FullBytes, &serial); err != nil {
		return nil, err
	}
	negative, err := asn1.Marshal(new(big.Int).Neg(serial))
	if err != nil {
		return nil, err
	}
	fields[1] = asn1.RawValue{FullBytes: negative}
	tbs, err := asn1.Marshal(fields)
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256(tbs)
	sig, err := ecdsa.SignASN1(rand.Reader, caKey, digest[:])
	if err != nil {
		return nil, err
	}
	cert.TBS = asn1.RawValue{FullBytes: tbs}
	cert.Signature = asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}
	out, err := asn1.Marshal(cert)
	if err != nil {
		return nil, err
	}
	return out, nil
}
