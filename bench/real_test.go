package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// wireRequest is req as a client sends it, without the size: a request header of version 1, or 2
// (with a tagged field) for a flexible version.
func wireRequest(req kmsg.Request, version int16, clientID string) []byte {
	req.SetVersion(version)
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, 7)
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 1, 5, 2, 'h', 'i') // one tagged field: tag 5, two bytes
	}
	return req.AppendTo(b)
}

// The counting proxy's requests are counted by kind, and a Produce's record bytes as on kfake,
// whether the header is flexible or not.
func TestDecodeRequest(t *testing.T) {
	for _, version := range []int16{7, 9, 11} {
		p := kmsg.NewPtrProduceRequest()
		p.Acks, p.TimeoutMillis = -1, 1000
		topic := kmsg.NewProduceRequestTopic()
		topic.Topic = "g.neli"
		part := kmsg.NewProduceRequestTopicPartition()
		part.Records = bytes.Repeat([]byte{1}, 135)
		topic.Partitions = append(topic.Partitions, part)
		p.Topics = append(p.Topics, topic)
		var c requestCounter
		c.observe(decodeRequest(wireRequest(p, version, "goneli-m01")))
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group = "g"
		c.observe(decodeRequest(wireRequest(hb, 4, "")))
		s := c.snapshot()
		if s.byKey[kmsg.Produce.Int16()] != 1 || s.byKey[kmsg.Heartbeat.Int16()] != 1 || s.produceBytes != 135 {
			t.Errorf("Produce v%d: counted %+v, want one Produce of 135 record bytes and one Heartbeat", version, s)
		}
	}
	if decodeRequest([]byte{0}) != nil {
		t.Error("a request too short to name its key was decoded")
	}
}

// A report with --real-kafka's section renders the two brokers side by side, in the page and in
// the README's table, and the idle leader beside goneli v0.5.0's.
func TestRenderRealKafka(t *testing.T) {
	mk := func(broker string, handoff, idle float64) *Report {
		s := Series{Name: seriesHandoff, HeartbeatTimeoutMs: 5000, Stat: Stat{N: 2, Median: handoff, P90: handoff + 1, Max: handoff + 1}}
		return &Report{Broker: broker, GroupSize: 3, CostTaskMs: 10, IdleTaskMs: 100, Started: time.Unix(0, 0).UTC(),
			FirstLeader: []FirstLeader{{Contenders: 3, LaunchToAcquired: Stat{N: 1, Median: 100, P90: 100}}},
			Series:      []Series{s},
			Cost:        []Cost{{Instances: 3, LeaderCPUSPerMin: 2.4, FollowerCPUSPerMin: 0.3, HarnessCPUSPerMin: 0.4, RequestsPerS: 12}},
			IdleLeader:  &Cost{Instances: 3, LeaderCPUSPerMin: idle},
			Roles:       &RolesReport{Cost: []RolesCost{{Setup: setupRoles, Processes: 1, Roles: 8, RequestsPerSPerRole: 1.25}}},
		}
	}
	rep := mk("embedded (kfake)", 264, 0.41)
	rep.Real = mk("Apache Kafka 4.4.0 (1 node, fast profile)", 512, 0.43)
	rep.Real.Cost[0].BrokerJVMCPUSPerMin = 3.5
	rep.Series = append(rep.Series, Series{Name: seriesFenceFenced, HeartbeatTimeoutMs: 5000, Stat: Stat{N: 1, Median: 4651}})
	dir := t.TempDir()
	md, readme := filepath.Join(dir, "results.md"), filepath.Join(dir, "README.md")
	if err := os.WriteFile(readme, []byte(summaryBegin+"\n"+summaryEnd+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeRendered(rep, options{md: md, readme: readme}, "results.json"); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(md)
	for _, want := range []string{
		"| Same run, two brokers (medians; p90 after the slash) | embedded (kfake) | Apache Kafka 4.4.0 (1 node, fast profile) |",
		"| graceful handoff: leader SIGTERM (Close) -> successor acts, HeartbeatTimeout 5s | 264 ms / 265 ms | 512 ms / 513 ms |",
		"| group of 3: broker + harness CPU s/min | 0.40 | 0.40 (JVM 3.50) |",
		"| roles cost, one instance, 8 roles (NewRoles): broker requests/s per role | 1.25 | 1.25 |",
		"Every table of the run on Apache Kafka 4.4.0",
	} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q", want)
		}
	}
	got, _ := os.ReadFile(readme)
	for _, want := range []string{
		"| figure (group of 3, medians) | goneli v0.5.0 | goneli | goneli on Apache Kafka 4.4.0 (1 node, fast profile) |",
		"| idle leader CPU s/min (goneli: its task sleeps 100ms per run) | 0.68 (c) | 0.41 | 0.43 |",
		"| leader CPU s/min, running the benchmark's 10ms task loop | not measured | 2.40 | 2.40 |",
		// Not measured on Apache Kafka: said so rather than left blank.
		"| network cut -> leader fenced, 5 s lease | not measured | 4651 ms | not measured |",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("README lacks %q:\n%s", want, got)
		}
	}
}
