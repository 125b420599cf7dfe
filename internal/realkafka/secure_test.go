package realkafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// A SASL_SSL listener with SCRAM-SHA-512 users formatted into the cluster, behind Kafka's
// StandardAuthorizer: a user logs in over TLS that the cluster's authority signed, a super user may
// do anything, a user granted nothing may not describe a topic, and a wrong password is refused
// as a failed authentication.
func TestSASLSSLListener(t *testing.T) {
	configs := SCRAMListenerConfigs("SECURE", "SCRAM-SHA-512")
	configs["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
	// The harness's own PLAINTEXT listener, which the nodes use among themselves, is ANONYMOUS.
	configs["super.users"] = "User:ANONYMOUS;User:root"
	c := Start(t, Options{
		Listeners: []Listener{{Name: "SECURE", Protocol: "SASL_SSL"}},
		SCRAM: []SCRAMUser{
			{Mechanism: "SCRAM-SHA-512", Name: "root", Password: "root-secret"},
			{Mechanism: "SCRAM-SHA-512", Name: "nobody", Password: "nobody-secret"},
		},
		Configs: configs,
	})
	t.Logf("Kafka %s: %s", c.Version(), c.Timing())
	pem, err := os.ReadFile(c.CAFile(t))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", c.CAFile(t))
	}
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	// metadata asks, as user, for topic's metadata over the SASL_SSL listener, with its own TLS
	// verification of the broker's certificate (the host is 127.0.0.1).
	metadata := func(user, password, topic string) (*kmsg.MetadataResponse, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Listener(t, "SECURE"), ",")...),
			kgo.DialTLSConfig(&tls.Config{RootCAs: roots}),
			kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = []kmsg.MetadataRequestTopic{rt}
		return req.RequestWith(ctx, cl)
	}

	const topic = "secure"
	if _, err := admin(t, c.Bootstrap()).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// CreateTopics is answered once the controller has the topic; the broker serves its metadata
	// only once it has applied that record, a moment later (UNKNOWN_TOPIC_OR_PARTITION meanwhile: 2
	// of 3 runs under .ci/stress). Kafka announces nothing to wait on, so ask until it knows.
	for {
		resp, err := metadata("root", "root-secret", topic)
		if err != nil {
			t.Fatalf("root over SASL_SSL: %v", err)
		}
		if !errors.Is(kerr.ErrorForCode(resp.Topics[0].ErrorCode), kerr.UnknownTopicOrPartition) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the broker did not serve %s's metadata within %v", topic, awaitLimit)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, tc := range []struct {
		user, password string
		want           error
	}{
		{"root", "root-secret", nil},
		{"nobody", "nobody-secret", kerr.TopicAuthorizationFailed},
	} {
		resp, err := metadata(tc.user, tc.password, topic)
		if err != nil {
			t.Fatalf("%s over SASL_SSL: %v", tc.user, err)
		}
		if got := kerr.ErrorForCode(resp.Topics[0].ErrorCode); !errors.Is(got, tc.want) {
			t.Errorf("%s: the topic's metadata answered %v, want %v", tc.user, got, tc.want)
		}
	}
	_, err = metadata("nobody", "wrong", topic)
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Errorf("a wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}

// Users that kafka-storage format would refuse or misread are refused before any JVM starts,
// naming the field.
func TestCheckSCRAM(t *testing.T) {
	for _, tc := range []struct {
		u    SCRAMUser
		want string
	}{
		{SCRAMUser{"SCRAM-SHA-512", "a", "b"}, ""},
		{SCRAMUser{"SCRAM-SHA-256", "a", "b=c"}, ""},
		{SCRAMUser{"PLAIN", "a", "b"}, "Options.SCRAM[0].Mechanism"},
		{SCRAMUser{"SCRAM-SHA-512", "a,b", "c"}, "Options.SCRAM[0].Name"},
		{SCRAMUser{"SCRAM-SHA-512", "", "c"}, "Options.SCRAM[0].Name"},
		{SCRAMUser{"SCRAM-SHA-512", "a", "b,c"}, "Options.SCRAM[0].Password"},
	} {
		err := checkSCRAM(Options{SCRAM: []SCRAMUser{tc.u}})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want it accepted", tc.u, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error naming %s", tc.u, err, tc.want)
		}
	}
}
