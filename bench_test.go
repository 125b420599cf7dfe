package goneli

import (
	"testing"
	"time"

	"github.com/goneli/goneli/internal/core"
)

func BenchmarkHeartbeatAppend(b *testing.B) {
	h := core.Heartbeat{Tenure: 0x1234_5678_9abc_def0, Seq: 42, SentWall: time.Now().UnixNano(), SentMono: time.Second}
	buf := make([]byte, 0, core.HeartbeatSize)
	b.ReportAllocs()
	b.SetBytes(core.HeartbeatSize)
	for b.Loop() {
		h.Seq++
		buf = h.AppendTo(buf[:0])
	}
	if len(buf) != core.HeartbeatSize {
		b.Fatalf("encoded %d bytes, want %d", len(buf), core.HeartbeatSize)
	}
}

// BenchmarkHeartbeatSend is the encoding as the leader does it: each record gets its own buffer,
// because the producer keeps the value until delivery.
func BenchmarkHeartbeatSend(b *testing.B) {
	h := core.Heartbeat{Tenure: 0x1234_5678_9abc_def0, Seq: 42, SentWall: time.Now().UnixNano(), SentMono: time.Second}
	var buf []byte
	b.ReportAllocs()
	b.SetBytes(core.HeartbeatSize)
	for b.Loop() {
		h.Seq++
		buf = h.AppendTo(make([]byte, 0, core.HeartbeatSize))
	}
	if len(buf) != core.HeartbeatSize {
		b.Fatalf("encoded %d bytes, want %d", len(buf), core.HeartbeatSize)
	}
}

func BenchmarkHeartbeatDecode(b *testing.B) {
	in := core.Heartbeat{Tenure: 0x1234_5678_9abc_def0, Seq: 42, SentWall: time.Now().UnixNano(), SentMono: time.Second, Since: 7}
	rec := in.AppendTo(nil)
	var out core.Heartbeat
	b.ReportAllocs()
	b.SetBytes(core.HeartbeatSize)
	for b.Loop() {
		if err := out.Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
	if out != in {
		b.Fatalf("decoded %+v, want %+v", out, in)
	}
}
