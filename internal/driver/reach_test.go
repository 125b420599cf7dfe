package driver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/testkit"
)

func TestReachability(t *testing.T) {
	var r reachability
	if _, _, down := r.state(); down {
		t.Fatal("a new instance is marked unreachable")
	}
	if r.startProbe(0) {
		t.Fatal("a probe started while Kafka is reachable")
	}
	if r.ok("consumer") {
		t.Fatal("an answer ended an outage that never began")
	}

	if !r.fail(10*time.Second, "consumer", "all brokers down") {
		t.Fatal("the first failure did not begin an outage")
	}
	if r.fail(12*time.Second, "producer", "all brokers down") {
		t.Fatal("a second client's failure began another outage")
	}
	since, reason, down := r.state()
	if !down || since != 10*time.Second || reason != "producer: all brokers down" {
		t.Fatalf("after two failures: since %v, reason %q, down %v; want the first failure's time and the newest reason", since, reason, down)
	}

	// A delivery report queued before the producer's connections broke answers for the producer,
	// not for the consumer.
	if r.ok("producer") {
		t.Fatal("the producer's answer ended an outage the consumer still reports")
	}
	if since, _, down := r.state(); !down || since != 10*time.Second {
		t.Fatalf("after the producer's answer: since %v, down %v; want the consumer's outage from 10s", since, down)
	}
	r.fail(13*time.Second, "producer", "all brokers down")

	if !r.startProbe(13 * time.Second) {
		t.Fatal("no probe started once Kafka was marked unreachable")
	}
	if r.startProbe(13 * time.Second) {
		t.Fatal("a second probe started while one is under way")
	}
	if r.probed(14*time.Second, time.Second, errors.New("timed out")) {
		t.Fatal("a failed probe ended the outage")
	}
	if _, reason, _ := r.state(); reason != "probe: timed out" {
		t.Fatalf("after a failed probe the reason is %q; want the probe's error", reason)
	}
	if r.startProbe(14*time.Second + 999*time.Millisecond) {
		t.Fatal("a probe started before the interval since the last one ended")
	}
	if !r.startProbe(15 * time.Second) {
		t.Fatal("no probe started once the interval had passed")
	}
	if !r.probed(15*time.Second, time.Second, nil) {
		t.Fatal("a probe that reached Kafka did not end the outage")
	}
	if _, reason, down := r.state(); down || reason != "" {
		t.Fatalf("after a probe reached Kafka: down %v, reason %q", down, reason)
	}

	// New's own failure is cleared by any client's answer; a new outage starts afresh.
	r.fail(20*time.Second, "admin", "no metadata")
	if !r.ok("consumer") {
		t.Fatal("the consumer's answer did not end New's outage")
	}
	r.fail(30*time.Second, "producer", "all brokers down")
	if since, _, _ := r.state(); since != 30*time.Second {
		t.Fatalf("a new outage starts at %v; want 30s", since)
	}
	// A probe that fails after the driver saw an answer leaves the mark clear.
	if !r.startProbe(30 * time.Second) {
		t.Fatal("no probe started for the new outage")
	}
	r.ok("producer")
	r.probed(31*time.Second, time.Second, errors.New("timed out"))
	if _, _, down := r.state(); down {
		t.Fatal("a late failed probe marked Kafka unreachable again")
	}
}

func TestCheckSpeaksKafka(t *testing.T) {
	web, silent, dead := testkit.ListenLocal(t, testkit.HTTPServer), testkit.ListenLocal(t, testkit.SilentServer), testkit.FreePort(t)
	for _, c := range []struct {
		name     string
		config   KafkaConfigMap
		notKafka bool
		answered string // the server the NotKafkaError names
	}{
		{"web server", KafkaConfigMap{"bootstrap.servers": web}, true, web},
		{"web server with a scheme", KafkaConfigMap{"bootstrap.servers": "PLAINTEXT://" + web}, true, web},
		{"web server under SASL", KafkaConfigMap{"bootstrap.servers": web, "security.protocol": "SASL_PLAINTEXT"}, true, web},
		// A TLS listener would not answer in the clear either; librdkafka tells those apart.
		{"web server under TLS", KafkaConfigMap{"bootstrap.servers": web, "security.protocol": "SSL"}, false, ""},
		// A broker may be on its way up.
		{"nothing listening", KafkaConfigMap{"bootstrap.servers": dead}, false, ""},
		// A port that accepts a connection and stays silent for the whole probe is no broker, as
		// neli has it too.
		{"silent server", KafkaConfigMap{"bootstrap.servers": silent}, true, silent},
		{"web server and nothing", KafkaConfigMap{"bootstrap.servers": dead + "," + web}, true, web},
		{"silent server and nothing", KafkaConfigMap{"bootstrap.servers": dead + "," + silent}, true, silent},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkSpeaksKafka(c.config, 200*time.Millisecond, testErrors{})
			var nk *apiError
			if got := errors.As(err, &nk); got != c.notKafka {
				t.Fatalf("checkSpeaksKafka(%v) = %v; want a NotKafkaError: %v", c.config, err, c.notKafka)
			}
			// The configured list in the error names every server; Answers says which one answered.
			if nk != nil && (!strings.Contains(err.Error(), "bootstrap.servers") || len(nk.Answers) == 0 || !strings.HasPrefix(nk.Answers[0], c.answered+": ")) {
				t.Errorf("the error does not name bootstrap.servers and the server that answered: %v", err)
			}
		})
	}
}
