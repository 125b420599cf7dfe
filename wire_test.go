package goneli

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The exchange of RFC 7677's example, user "user" with password "pencil": the client's messages
// must match it byte for byte, and a server signature that does not match must fail.
func TestScramRFC7677(t *testing.T) {
	const (
		clientFirst = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
		serverFirst = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
		clientFinal = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
		serverFinal = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
	)
	server := func(final string) func([]byte) ([]byte, error) {
		round := 0
		return func(in []byte) ([]byte, error) {
			round++
			switch {
			case round == 1 && string(in) == clientFirst:
				return []byte(serverFirst), nil
			case round == 2 && string(in) == clientFinal:
				return []byte(final), nil
			}
			t.Fatalf("client message %d: %q", round, in)
			return nil, nil
		}
	}
	if err := scram(server(serverFinal), sha256.New, "user", "pencil", "rOprNGfwEbeRWgbNEkqO"); err != nil {
		t.Fatal(err)
	}
	forged := "v=" + strings.Repeat("A", 43) + "="
	if err := scram(server(forged), sha256.New, "user", "pencil", "rOprNGfwEbeRWgbNEkqO"); err == nil {
		t.Error("a server signature that does not match was accepted")
	}
}

// Which client settings goneli's own connection follows, and that one it cannot follow is named.
func TestWireDescriberSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf kafka.ConfigMap
		want string // in the error; empty: supported
	}{
		{"plaintext", kafka.ConfigMap{"bootstrap.servers": "a:9092,PLAINTEXT://b:9092"}, ""},
		{"no servers", kafka.ConfigMap{"bootstrap.servers": " , "}, "bootstrap.servers"},
		{"SASL PLAIN", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "plain"}, ""},
		{"SASL default mechanism", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "sasl_plaintext"}, "sasl.mechanism=GSSAPI"},
		{"OAUTHBEARER", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism=OAUTHBEARER"},
		{"SSL with system roots", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL"}, ""},
		{"keystore", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location"},
		{"encrypted key", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.key.password": "x"}, "ssl.key.password"},
		{"missing CA file", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location"},
		{"certificate without key", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "SSL", "ssl.certificate.pem": "x"}, "without its key"},
		{"unknown protocol", kafka.ConfigMap{"bootstrap.servers": "a:1", "security.protocol": "carrier_pigeon"}, "security.protocol=carrier_pigeon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newWireDescriber(tc.conf, false)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, errWireUnsupported) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
