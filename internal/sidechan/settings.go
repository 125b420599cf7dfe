package sidechan

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/kprobe"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// # From librdkafka's settings to kgo's
//
// This file is the one place that reads a librdkafka configuration for goneli's own connection.
// Every setting that decides how a broker is reached, verified or authenticated is either followed
// or refused with ErrUnsupported, so that what goneli does itself never reaches less than
// librdkafka does with the same settings: a refused setting leaves the work to librdkafka.
// Settings of no consequence for a connection (the consumer's, the producer's) are ignored.

// ErrUnsupported is wrapped by the error Translate (and New) returns for a setting that goneli's
// own connection cannot follow as librdkafka does.
var ErrUnsupported = errors.New("not supported by goneli's own connection")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrUnsupported)
}

// Settings is how goneli's own connection reaches the brokers.
type Settings struct {
	Seeds    []string // host:port, 9092 where bootstrap.servers names no port
	ClientID string
	Network  string      // tcp, tcp4 or tcp6 (broker.address.family)
	TLS      *tls.Config // nil in the clear
	// Mechanism is the SASL mechanism, empty without SASL; User is sasl.username.
	Mechanism, User string
	sasl            sasl.Mechanism
	// RequestTimeout (socket.timeout.ms), DialTimeout (socket.connection.setup.timeout.ms) and
	// IdleTimeout (connections.max.idle.ms) are zero where not set.
	RequestTimeout, DialTimeout, IdleTimeout time.Duration
	// Backoff and BackoffMax are the first and the longest pause between retries
	// (retry.backoff.ms, retry.backoff.max.ms; librdkafka's defaults 100 ms and 1 s).
	Backoff, BackoffMax time.Duration
}

// libraryDefaultPort is the port librdkafka gives a bootstrap server named without one.
const libraryDefaultPort = "9092"

// Translate reads the connection settings of a librdkafka configuration, or returns an error
// wrapping ErrUnsupported that names the setting it cannot follow.
func Translate(conf kafka.ConfigMap) (Settings, error) {
	get := func(key string) (string, bool) {
		v, ok := conf[key]
		if !ok || v == nil {
			return "", false
		}
		return fmt.Sprint(v), true
	}
	s := Settings{Network: "tcp", Backoff: 100 * time.Millisecond, BackoffMax: time.Second}
	servers, _ := get("bootstrap.servers")
	s.Seeds = kprobe.Servers(servers)
	if len(s.Seeds) == 0 {
		return Settings{}, unsupported("no bootstrap.servers")
	}
	s.ClientID, _ = get("client.id")
	switch fam, _ := get("broker.address.family"); fam {
	case "v4":
		s.Network = "tcp4"
	case "v6":
		s.Network = "tcp6"
	}
	for key, d := range map[string]*time.Duration{
		"socket.timeout.ms": &s.RequestTimeout, "socket.connection.setup.timeout.ms": &s.DialTimeout,
		"connections.max.idle.ms": &s.IdleTimeout, "retry.backoff.ms": &s.Backoff, "retry.backoff.max.ms": &s.BackoffMax,
	} {
		if v, ok := get(key); ok {
			if ms, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && ms > 0 {
				*d = time.Duration(ms) * time.Millisecond
			}
		}
	}
	s.BackoffMax = max(s.BackoffMax, s.Backoff)

	protocol, _ := get("security.protocol")
	protocol = strings.ToLower(protocol)
	switch protocol {
	case "", "plaintext", "sasl_plaintext":
	case "ssl", "sasl_ssl":
		cfg, err := tlsConfig(get)
		if err != nil {
			return Settings{}, err
		}
		s.TLS = cfg
	default:
		return Settings{}, unsupported("security.protocol=%s", protocol)
	}
	if strings.HasPrefix(protocol, "sasl_") {
		mech, ok := get("sasl.mechanisms")
		if m, ok2 := get("sasl.mechanism"); ok2 {
			mech, ok = m, true
		}
		if !ok {
			mech = "GSSAPI" // librdkafka's default
		}
		s.Mechanism = strings.ToUpper(strings.TrimSpace(mech))
		s.User, _ = get("sasl.username")
		password, _ := get("sasl.password")
		switch s.Mechanism {
		case "PLAIN":
			s.sasl = plain.Auth{User: s.User, Pass: password}.AsMechanism()
		case "SCRAM-SHA-256":
			s.sasl = scram.Auth{User: s.User, Pass: password}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			s.sasl = scram.Auth{User: s.User, Pass: password}.AsSha512Mechanism()
		default:
			// GSSAPI needs Kerberos, OAUTHBEARER librdkafka's token refresh (or its OIDC client),
			// and librdkafka knows no other.
			return Settings{}, unsupported("sasl.mechanism=%s", s.Mechanism)
		}
	}
	return s, nil
}

// tlsRefused are the ssl settings whose effect goneli's connection cannot reproduce: keystores,
// encrypted keys, OpenSSL engines and providers, and checks or restrictions that Go's crypto/tls
// does not make the same way (revocation lists, cipher, curve and signature lists, a verification
// callback). Refusing them is what keeps a revoked certificate, say, from passing here while
// librdkafka refuses it.
var tlsRefused = []string{"ssl.keystore.location", "ssl.key.password", "ssl.engine.location", "ssl.engine.id",
	"ssl_engine_callback_data", "ssl.providers", "ssl.crl.location", "ssl.certificate.verify_cb",
	"ssl.cipher.suites", "ssl.curves.list", "ssl.sigalgs.list"}

// tlsConfig builds a TLS configuration from librdkafka's ssl.* settings.
func tlsConfig(get func(string) (string, bool)) (*tls.Config, error) {
	for _, key := range tlsRefused {
		if v, ok := get(key); ok && v != "" {
			return nil, unsupported("%s", key)
		}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	// "probe" asks librdkafka to find the system's CAs, which Go's default roots are.
	ca, _ := get("ssl.ca.location")
	hasCA := ca != "" && ca != "probe"
	caPEM, hasCAPEM := get("ssl.ca.pem")
	if hasCA || hasCAPEM {
		pool := x509.NewCertPool()
		if hasCAPEM && !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, unsupported("ssl.ca.pem: no certificate found")
		}
		if hasCA {
			if err := appendCAs(pool, ca); err != nil {
				return nil, err
			}
		}
		cfg.RootCAs = pool
	}
	certFile, hasCertFile := get("ssl.certificate.location")
	keyFile, hasKeyFile := get("ssl.key.location")
	certPEM, hasCertPEM := get("ssl.certificate.pem")
	keyPEM, hasKeyPEM := get("ssl.key.pem")
	switch {
	case hasCertFile && hasKeyFile:
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, unsupported("ssl.certificate.location, ssl.key.location: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case hasCertPEM && hasKeyPEM:
		pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			return nil, unsupported("ssl.certificate.pem, ssl.key.pem: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case hasCertFile || hasKeyFile || hasCertPEM || hasKeyPEM:
		return nil, unsupported("a client certificate without its key")
	}
	verify, _ := get("enable.ssl.certificate.verification")
	identify, _ := get("ssl.endpoint.identification.algorithm")
	switch {
	case strings.EqualFold(verify, "false") || verify == "0":
		cfg.InsecureSkipVerify = true
	case strings.EqualFold(identify, "none"):
		// librdkafka still verifies the chain, only not the name in it. Go's own verification
		// is switched off for the name, and the chain is verified by crypto/x509 below.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyChain(cs, roots) }
	}
	return cfg, nil
}

// appendCAs adds the certificates of a PEM file to pool, or those that OpenSSL would find in a
// directory (cahash.go): only hash-named entries, <subject hash>.0 and on.
func appendCAs(pool *x509.CertPool, location string) error {
	if st, err := os.Stat(location); err == nil && st.IsDir() {
		found, err := appendHashedCAs(pool, location)
		switch {
		case err != nil:
			return unsupported("ssl.ca.location: %v", err)
		case !found:
			return unsupported("ssl.ca.location: no certificate in directory %s under its subject's hash (<hash>.0, as openssl rehash names it), "+
				"the only entries OpenSSL reads there", location)
		}
		return nil
	}
	pem, err := os.ReadFile(location)
	if err != nil {
		return unsupported("ssl.ca.location: %v", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return unsupported("ssl.ca.location: no PEM certificate in %s", location)
	}
	return nil
}

// verifyChain verifies the broker's chain without its name, as librdkafka does with
// ssl.endpoint.identification.algorithm=none. A failure is a *tls.CertificateVerificationError,
// as Go's own verification reports one, so that it makes the connection give way to librdkafka
// alike (client.go).
func verifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the broker sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	if err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}
