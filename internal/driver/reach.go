package driver

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/goneli/goneli/internal/kprobe"
)

// A follower that cannot reach Kafka looks like a healthy one: it holds no partition, so nothing
// it waits for fails, and Pulse returns (false, nil) either way. reachability keeps what tells
// them apart for Stats and health checks: since when no broker answered, and why.
//
// librdkafka says when every broker connection of a client is down (_ALL_BROKERS_DOWN), but not
// when one comes back. The driver therefore clears a client's mark on any answer that client sees
// (a heartbeat delivered or read, a commit accepted, a rebalance), and an instance that sees none
// (an idle follower) probes: every RenewInterval while marked, it asks a short-lived admin client of its
// own for the leader topic's metadata. Nothing is probed while Kafka answers.

// reachability is the mark and the probe's schedule, on the lease's clock. It does no I/O; its
// methods are safe for concurrent use, as Stats reads it from any goroutine.
//
// Each client has a mark of its own, cleared only by that client's answers or by a probe: a
// client's events arrive in order, but the consumer's and the producer's do not arrive in order
// with each other, and a delivery report queued before the producer's connection broke must not
// clear the consumer's mark. New's own failure (client "admin") is cleared by any answer.
type reachability struct {
	mu      sync.Mutex
	out     map[string]time.Duration // since when, by client, for clients that reach no broker
	reason  string                   // the newest failure
	probing bool
	next    time.Duration // when the next probe is due
}

// fail marks client's Kafka connections down at now, for reason, keeping the start of an outage
// already marked. It reports whether this began an outage of the instance.
func (r *reachability) fail(now time.Duration, client, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	began := len(r.out) == 0
	if began {
		r.out = map[string]time.Duration{}
		r.next = now
	}
	if _, ok := r.out[client]; !ok {
		r.out[client] = now
	}
	r.reason = client + ": " + reason
	return began
}

// ok clears client's mark, as a broker answered it, and reports whether this ended an outage.
func (r *reachability) ok(client string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.out) == 0 {
		return false
	}
	delete(r.out, client)
	delete(r.out, "admin")
	if len(r.out) > 0 {
		return false
	}
	r.reason = ""
	return true
}

// state returns since when Kafka has been unreachable and the newest reason, or down false if it
// is reachable.
func (r *reachability) state() (since time.Duration, reason string, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.out {
		if !down || t < since {
			since, down = t, true
		}
	}
	return since, r.reason, down
}

// startProbe reports whether a probe should start now, and if so counts it as under way.
func (r *reachability) startProbe(now time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.out) == 0 || r.probing || now < r.next {
		return false
	}
	r.probing = true
	return true
}

// probed takes a probe's result at now: err nil clears every mark, anything else becomes the
// newest reason, and the next probe is due the interval every after this one ended. It reports
// whether this ended an outage.
func (r *reachability) probed(now time.Duration, every time.Duration, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.probing = false
	r.next = now + every
	ended := len(r.out) > 0 && err == nil
	switch {
	case err == nil:
		r.out, r.reason = nil, ""
	case len(r.out) > 0:
		r.reason = "probe: " + err.Error()
	}
	return ended
}

// probeReach starts a probe if the instance is marked unreachable and one is due; the result is
// applied from the probe's goroutine, which Close's clients-closed wait covers. Called with mu held.
func (d *Driver) probeReach() {
	if !d.Live() || !d.reach.startProbe(d.now()) {
		return
	}
	timeout := min(*d.config.HeartbeatTimeout, 5*time.Second)
	d.closers.Add(1)
	go func() {
		defer d.closers.Done()
		err := d.probeOnce(timeout)
		if d.reach.probed(d.now(), *d.config.RenewInterval, err) {
			d.log.I()("goneli %s: Kafka answers again (a metadata probe)", d.config.Name)
		}
	}()
}

// reachable records an answer to client from Kafka, seen by the driver.
func (d *Driver) reachable(client, what string) {
	if d.reach.ok(client) {
		d.log.I()("goneli %s: Kafka answers again (%s)", d.config.Name, what)
	}
}

// probeOnce asks a new admin client for the leader topic's metadata.
func (d *Driver) probeOnce(timeout time.Duration) error {
	admin, err := d.config.KafkaAdminProvider(d.confs.admin)
	if err != nil {
		return err
	}
	defer admin.Close()
	_, err = admin.GetMetadata(&d.topic, false, int(timeout.Milliseconds()))
	return err
}

// unreachable records that a Kafka client reports every broker down.
func (d *Driver) unreachable(client, reason string) {
	if d.reach.fail(d.now(), client, reason) {
		d.log.W()("goneli %s: cannot reach Kafka (%s: %s); Stats reports it until a broker answers", d.config.Name, client, reason)
	}
}

// reachTimeout bounds each server's answer when New checks that the bootstrap servers speak Kafka.
// The check comes after New's metadata request has gone unanswered for a HeartbeatTimeout, so a
// server that is silent to it has been silent for HeartbeatTimeout plus this.
const reachTimeout = 2 * time.Second

// checkSpeaksKafka returns errs.NotKafka's error (goneli.NotKafkaError) if no bootstrap server
// answers an ApiVersions request within timeout and some server accepted the connection, and nil
// otherwise. It only asks over plaintext listeners: a TLS listener does not answer in the clear, and
// telling a TLS handshake failure from another service is librdkafka's to do.
func checkSpeaksKafka(config KafkaConfigMap, timeout time.Duration, errs Errors) error {
	if !kprobe.InTheClear(config["security.protocol"]) {
		return nil
	}
	servers := fmt.Sprint(config["bootstrap.servers"])
	var answers []string
	for _, s := range kprobe.Servers(servers) {
		conn, err := net.DialTimeout("tcp", s, timeout)
		if err != nil {
			continue
		}
		err = kprobe.SpeaksKafka(conn, timeout)
		_ = conn.Close()
		if err == nil {
			return nil
		}
		answers = append(answers, s+": "+err.Error())
	}
	if len(answers) == 0 {
		return nil
	}
	return errs.NotKafka(servers, answers)
}
