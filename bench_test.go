package goneli

import (
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// The benchmarks here time the parts of a pulse that run on every call; the figures of the
// protocol as a whole (failover, fencing, cost per process) come from `go run ./bench`.

func BenchmarkHeartbeatAppend(b *testing.B) {
	h := heartbeat{tenure: 0x1234_5678_9abc_def0, seq: 42, sentWall: time.Now().UnixNano(), sentMono: time.Second}
	buf := make([]byte, 0, heartbeatSize)
	b.ReportAllocs()
	b.SetBytes(heartbeatSize)
	for b.Loop() {
		h.seq++
		buf = h.appendTo(buf[:0])
	}
	if len(buf) != heartbeatSize {
		b.Fatalf("encoded %d bytes, want %d", len(buf), heartbeatSize)
	}
}

// BenchmarkHeartbeatSend is the encoding as the leader does it: each record gets its own buffer,
// because the producer keeps the value until delivery.
func BenchmarkHeartbeatSend(b *testing.B) {
	h := heartbeat{tenure: 0x1234_5678_9abc_def0, seq: 42, sentWall: time.Now().UnixNano(), sentMono: time.Second}
	var buf []byte
	b.ReportAllocs()
	b.SetBytes(heartbeatSize)
	for b.Loop() {
		h.seq++
		buf = h.appendTo(make([]byte, 0, heartbeatSize))
	}
	if len(buf) != heartbeatSize {
		b.Fatalf("encoded %d bytes, want %d", len(buf), heartbeatSize)
	}
}

func BenchmarkHeartbeatDecode(b *testing.B) {
	in := heartbeat{tenure: 0x1234_5678_9abc_def0, seq: 42, sentWall: time.Now().UnixNano(), sentMono: time.Second, since: 7}
	rec := in.appendTo(nil)
	var out heartbeat
	b.ReportAllocs()
	b.SetBytes(heartbeatSize)
	for b.Loop() {
		if err := out.decode(rec); err != nil {
			b.Fatal(err)
		}
	}
	if out != in {
		b.Fatalf("decoded %+v, want %+v", out, in)
	}
}

// benchLeader starts an embedded broker and one instance, and pulses it until it leads.
func benchLeader(b *testing.B) *neli {
	b.Helper()
	broker, err := kafkatest.Start()
	if err != nil {
		b.Fatalf("starting embedded broker: %v", err)
	}
	b.Cleanup(broker.Close)
	quiet := scribe.New(scribe.StandardBinding())
	quiet.SetEnabled(scribe.Off)
	n, err := New(Config{
		KafkaConfig:   KafkaConfigMap{"bootstrap.servers": broker.Addr},
		LeaderGroupID: "bench",
		Name:          "bench-leader",
		Scribe:        quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := n.Close(); err != nil {
			b.Error(err)
		}
	})
	if leader, err := n.Pulse(30 * time.Second); err != nil || !leader {
		b.Fatalf("no leadership within 30s (leader %v, err %v)", leader, err)
	}
	return n.(*neli)
}

// BenchmarkLeader times the calls a leader's loop makes all the time, on one live leader on the
// embedded broker (default settings: MinPollInterval 100 ms, HeartbeatTimeout 5 s).
func BenchmarkLeader(b *testing.B) {
	n := benchLeader(b)
	b.Run("PulseNotDue", func(b *testing.B) { benchPulseNotDue(b, n) })
	b.Run("IsLeader", func(b *testing.B) {
		b.ReportAllocs()
		leading := 0
		for b.Loop() {
			if n.IsLeader() {
				leading++
			}
		}
		if leading == 0 {
			b.Fatal("never leader")
		}
	})
}

// benchPulseNotDue times Pulse on a live leader whose poll deadline has not expired: it returns at
// once. The timer runs only in windows that begin right after a real cycle and end well before the
// next one is due, so no Kafka work is timed; the cycles between windows keep renewing the lease.
func benchPulseNotDue(b *testing.B, n *neli) {
	interval := *n.config.MinPollInterval
	window := 1000 // Pulse calls per timed window, resized to a quarter of the interval's worth
	dueCycles := 0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		// Wait out the current interval and let one Pulse run the due cycle, so that the window
		// starts with (almost) a whole interval ahead of it.
		time.Sleep(n.pollDeadline.Remaining())
		for n.pollDeadline.Elapsed() >= interval/4 {
			if _, err := n.Pulse(0); err != nil {
				b.Fatal(err)
			}
		}
		if !n.IsLeader() {
			b.Fatal("lost leadership")
		}
		last := n.pollDeadline.Last()
		count := min(window, b.N-done)
		start := time.Now()
		b.StartTimer()
		for range count {
			if leader, err := n.Pulse(0); !leader || err != nil {
				b.Fatalf("leader %v, err %v", leader, err)
			}
		}
		b.StopTimer()
		took := time.Since(start)
		if !n.pollDeadline.Last().Equal(last) {
			dueCycles++ // the window outlasted the deadline (a loaded machine) and a cycle ran in it
		}
		done += count
		if perCall := took / time.Duration(count); perCall > 0 {
			window = max(1000, int(interval/4/perCall))
		}
	}
	b.ReportMetric(float64(dueCycles), "due-cycles")
}
