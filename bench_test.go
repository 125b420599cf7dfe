package goneli

import (
	"testing"
	"time"
)

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
