package coretest

import (
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// benchLeader starts an embedded broker and one instance, and pulses it until it leads.
func benchLeader(b *testing.B) Neli {
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
	return n
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
func benchPulseNotDue(b *testing.B, n Neli) {
	interval, deadline := DefaultMinPollInterval, n.Deadline()
	window := 1000 // Pulse calls per timed window, resized to a quarter of the interval's worth
	dueCycles := 0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		// Wait out the current interval and let one Pulse run the due cycle, so that the window
		// starts with (almost) a whole interval ahead of it.
		time.Sleep(deadline.Remaining())
		for deadline.Elapsed() >= interval/4 {
			if _, err := n.Pulse(0); err != nil {
				b.Fatal(err)
			}
		}
		if !n.IsLeader() {
			b.Fatal("lost leadership")
		}
		last := deadline.Last()
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
		if !deadline.Last().Equal(last) {
			dueCycles++ // the window outlasted the deadline (a loaded machine) and a cycle ran in it
		}
		done += count
		if perCall := took / time.Duration(count); perCall > 0 {
			window = max(1000, int(interval/4/perCall))
		}
	}
	b.ReportMetric(float64(dueCycles), "due-cycles")
}
