package goneli

import (
	"testing"
	"time"
)

func BenchmarkHeartbeatAppend(b *testing.B) {
	h := Heartbeat{Tenure: 0x1234_5678_9abc_def0, Seq: 42, SentWall: time.Now().UnixNano(), SentMono: time.Second}
	buf := make([]byte, 0, HeartbeatSize)
	b.ReportAllocs()
	b.SetBytes(HeartbeatSize)
	for b.Loop() {
		h.Seq++
		buf = h.AppendTo(buf[:0])
	}
	if len(buf) != HeartbeatSize {
		b.Fatalf("encoded %d bytes, want %d", len(buf), HeartbeatSize)
	}
}

// BenchmarkHeartbeatSend is the encoding as the leader does it: each record gets its own buffer,
// because the producer keeps the value until delivery.
func BenchmarkHeartbeatSend(b *testing.B) {
	h := Heartbeat{Tenure: 0x1234_5678_9abc_def0, Seq: 42, SentWall: time.Now().UnixNano(), SentMono: time.Second}
	var buf []byte
	b.ReportAllocs()
	b.SetBytes(HeartbeatSize)
	for b.Loop() {
		h.Seq++
		buf = h.AppendTo(make([]byte, 0, HeartbeatSize))
	}
	if len(buf) != HeartbeatSize {
		b.Fatalf("encoded %d bytes, want %d", len(buf), HeartbeatSize)
	}
}

func BenchmarkHeartbeatDecode(b *testing.B) {
	in := Heartbeat{Tenure: 0x1234_5678_9abc_def0, Seq: 42, SentWall: time.Now().UnixNano(), SentMono: time.Second, Since: 7}
	rec := in.AppendTo(nil)
	var out Heartbeat
	b.ReportAllocs()
	b.SetBytes(HeartbeatSize)
	for b.Loop() {
		if err := out.Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
	if out != in {
		b.Fatalf("decoded %+v, want %+v", out, in)
	}
}
