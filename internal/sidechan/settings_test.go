package sidechan

import (
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/testkit"
)

// Every librdkafka setting that decides how a broker is reached, verified or authenticated: what
// goneli's own connection makes of it, or that it refuses it, naming the setting.
func TestTranslate(t *testing.T) {
	caFile := testkit.NewPKI(t, "broker").CAFile
	for _, tc := range []struct {
		name    string
		conf    kafka.ConfigMap
		refused string // in the error; empty: followed
		check   func(t *testing.T, s Settings)
	}{
		{"servers, schemes and ports", kafka.ConfigMap{"bootstrap.servers": "a:9093, PLAINTEXT://b:9094,localhost,[::1],::1,10.0.0.1"}, "",
			func(t *testing.T, s Settings) {
				want := []string{"a:9093", "b:9094", "localhost:9092", "[::1]:9092", "[::1]:9092", "10.0.0.1:9092"}
				if !slices.Equal(s.Seeds, want) {
					t.Errorf("seeds %q, want %q", s.Seeds, want)
				}
			}},
		{"no servers", kafka.ConfigMap{"bootstrap.servers": " , "}, "bootstrap.servers", nil},
		{"client.id and address family", kafka.ConfigMap{"bootstrap.servers": "a:1", "client.id": "goneli-x", "broker.address.family": "v6"}, "",
			func(t *testing.T, s Settings) {
				if s.ClientID != "goneli-x" || s.Network != "tcp6" || s.TLS != nil || s.Mechanism != "" {
					t.Errorf("%+v", s)
				}
			}},
		{"timeouts and back-off", kafka.ConfigMap{"bootstrap.servers": "a:1", "socket.timeout.ms": 3000, "socket.connection.setup.timeout.ms": "2000",
			"connections.max.idle.ms": 60000, "retry.backoff.ms": 50, "retry.backoff.max.ms": 400}, "",
			func(t *testing.T, s Settings) {
				if s.RequestTimeout != 3*time.Second || s.DialTimeout != 2*time.Second || s.IdleTimeout != time.Minute ||
					s.Backoff != 50*time.Millisecond || s.BackoffMax != 400*time.Millisecond {
					t.Errorf("%+v", s)
				}
			}},
		{"librdkafka's back-off by default", kafka.ConfigMap{"bootstrap.servers": "a:1"}, "",
			func(t *testing.T, s Settings) {
				if s.Backoff != 100*time.Millisecond || s.BackoffMax != time.Second || s.RequestTimeout != 0 || s.IdleTimeout != 0 {
					t.Errorf("%+v", s)
				}
			}},
		{"SASL PLAIN", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "plain",
			"sasl.username": "u", "sasl.password": "p"}, "",
			func(t *testing.T, s Settings) {
				if s.Mechanism != "PLAIN" || s.User != "u" || s.sasl == nil || s.sasl.Name() != "PLAIN" || s.TLS != nil {
					t.Errorf("%+v", s)
				}
			}},
		{"SASL SCRAM-SHA-512 over TLS", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
			"sasl.mechanisms": "PLAIN", "ssl.ca.location": caFile}, "",
			func(t *testing.T, s Settings) {
				if s.Mechanism != "SCRAM-SHA-512" || s.sasl.Name() != "SCRAM-SHA-512" || s.TLS == nil || s.TLS.RootCAs == nil {
					t.Errorf("%+v", s)
				}
			}},
		{"SASL's default mechanism, GSSAPI", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "sasl_plaintext"}, "sasl.mechanism=GSSAPI", nil},
		{"OAUTHBEARER", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism=OAUTHBEARER", nil},
		{"a mechanism librdkafka does not know", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"}, "sasl.mechanism=AWS_MSK_IAM", nil},
		{"SSL with the system's roots", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.ca.location": "probe"}, "",
			func(t *testing.T, s Settings) {
				if s.TLS == nil || s.TLS.RootCAs != nil || s.TLS.InsecureSkipVerify || s.TLS.MinVersion != tls.VersionTLS12 {
					t.Errorf("%+v", s.TLS)
				}
			}},
		{"no verification", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "enable.ssl.certificate.verification": false}, "",
			func(t *testing.T, s Settings) {
				if !s.TLS.InsecureSkipVerify || s.TLS.VerifyConnection != nil {
					t.Errorf("%+v", s.TLS)
				}
			}},
		{"the chain without the name", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}, "",
			func(t *testing.T, s Settings) {
				if !s.TLS.InsecureSkipVerify || s.TLS.VerifyConnection == nil {
					t.Errorf("%+v", s.TLS)
				}
			}},
		{"a CA file that is missing", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location", nil},
		{"a certificate without its key", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.certificate.pem": "x"}, "without its key", nil},
		{"a keystore", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location", nil},
		{"an encrypted key", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.key.password": "x"}, "ssl.key.password", nil},
		{"an OpenSSL engine", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.engine.location": "/e.so"}, "ssl.engine.location", nil},
		{"OpenSSL providers", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.providers": "legacy"}, "ssl.providers", nil},
		{"a revocation list", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.crl.location": "/crl.pem"}, "ssl.crl.location", nil},
		{"a cipher list", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"}, "ssl.cipher.suites", nil},
		{"TLS settings without TLS", kafka.ConfigMap{"bootstrap.servers": "a:1", "ssl.keystore.location": "/k.p12"}, "", nil},
		{"an unknown protocol", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "carrier_pigeon"}, "security.protocol=carrier_pigeon", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Translate(tc.conf)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("error %v, want one wrapping ErrUnsupported and naming %q", err, tc.refused)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}
