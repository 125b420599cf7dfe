package goneli

import (
	"errors"
	"net"
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

// listenLocal accepts connections on a loopback port and hands each to answer.
func listenLocal(t *testing.T, answer func(net.Conn)) string {
	t.Helper()
	return testkit.ListenLocal(t, answer)
}

// httpServer answers every connection as a web server answers a request it cannot parse.
func httpServer(c net.Conn) {
	buf := make([]byte, 512)
	_, _ = c.Read(buf)
	_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
}

// silentServer reads until the client hangs up and never answers.
func silentServer(c net.Conn) {
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// freePort returns a loopback address that nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestCheckSpeaksKafka(t *testing.T) {
	web, silent, dead := listenLocal(t, httpServer), listenLocal(t, silentServer), freePort(t)
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
			err := checkSpeaksKafka(c.config, 200*time.Millisecond)
			var nk *NotKafkaError
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

// New against a port of another service fails once its metadata request has timed out, rather
// than leaving librdkafka to retry for ever.
func TestNewAgainstAnotherService(t *testing.T) {
	log := newTestLog(t)
	config := Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": listenLocal(t, httpServer)},
		LeaderGroupID:    "g",
		Name:             "a",
		Scribe:           log.Scribe(),
		HeartbeatTimeout: Duration(time.Second),
	}
	n, err := New(config)
	var nk *NotKafkaError
	if !errors.As(err, &nk) {
		if n != nil {
			_ = n.Close()
		}
		t.Fatalf("New against a web server: %v; want a NotKafkaError", err)
	}
}

// New against a port that accepts connections and never answers returned an instance that
// retried for ever, while neli gave up on the same port in seconds: it fails with a NotKafkaError
// too, once its metadata request and the probe after it have both gone unanswered.
func TestNewAgainstASilentPort(t *testing.T) {
	config := Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": listenLocal(t, silentServer)},
		LeaderGroupID:    "g",
		Name:             "a",
		Scribe:           newTestLog(t).Scribe(),
		HeartbeatTimeout: Duration(time.Second),
	}
	n, err := New(config)
	if n != nil {
		_ = n.Close()
	}
	var nk *NotKafkaError
	if !errors.As(err, &nk) {
		t.Fatalf("New against a silent port: %v; want a NotKafkaError", err)
	}
	if !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("the error does not say that the server stayed silent: %v", err)
	}
}

// New against a port where no broker listens yet succeeds, and Stats says since when Kafka has
// been unreachable, and why.
func TestNewAgainstNoBroker(t *testing.T) {
	log := newTestLog(t)
	config := Config{
		KafkaConfig:      KafkaConfigMap{"bootstrap.servers": freePort(t)},
		LeaderGroupID:    "g",
		Name:             "a",
		Scribe:           log.Scribe(),
		HeartbeatTimeout: Duration(time.Second),
	}
	before := time.Now()
	n, err := New(config)
	if err != nil {
		t.Fatalf("New without a broker: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		select {
		case <-n.(*neli).life.clientsClosed:
		case <-time.After(awaitLimit):
			t.Errorf("Kafka clients still closing %v after Close", awaitLimit)
		}
	})
	s := n.(Curator).Stats()
	if s.UnreachableSince.Before(before) || s.UnreachableSince.After(time.Now()) || !strings.Contains(s.UnreachableReason, "metadata") {
		t.Fatalf("Stats after New without a broker: unreachable since %v (New began at %v), reason %q; want a time within New and the metadata failure",
			s.UnreachableSince, before, s.UnreachableReason)
	}
	if ok, err := n.Pulse(10 * time.Millisecond); ok || err != nil {
		t.Fatalf("Pulse without a broker = %v, %v; want false, nil", ok, err)
	}
}
