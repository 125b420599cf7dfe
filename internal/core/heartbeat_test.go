package core

import (
	"testing"
)

// Records round-trip; a version 1 record (51 bytes, no kind or role) reads as a heartbeat of the
// unnamed role, a version 2 record (no address) as one without an address and a version 3 record
// (no transfer target) as one without a target, so that instances of earlier versions and this one
// read each other.
func TestHeartbeatRecords(t *testing.T) {
	in := Heartbeat{Tenure: 1, Seq: 2, SentWall: 3, SentMono: 4, Since: 5, Token: 6, Kind: KindReleasing, Role: "billing", Address: "http://10.0.0.7:8080", To: "b-2"}
	var out Heartbeat
	if err := out.Decode(in.AppendTo(nil)); err != nil || out != in {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, in)
	}
	plain := Heartbeat{Tenure: 1, Seq: 2, SentWall: 3, SentMono: 4, Since: 5, Token: 6}
	v1 := plain.AppendTo(nil)[:heartbeatV1Size]
	v1[2] = 1
	if err := out.Decode(v1); err != nil || out.Kind != KindHeartbeat || out.Role != "" || out.Token != 6 {
		t.Fatalf("version 1 record: %+v, %v", out, err)
	}
	v2 := in.AppendTo(nil)[:heartbeatV2Size+len(in.Role)]
	v2[2] = 2
	if err := out.Decode(append(v2, "future fields"...)); err != nil || out.Kind != in.Kind || out.Role != in.Role || out.Address != "" {
		t.Fatalf("version 2 record: %+v, %v", out, err)
	}
	v3 := in.AppendTo(nil)[:in.Size()-2-len(in.To)]
	v3[2] = 3
	if err := out.Decode(append(v3, "future fields"...)); err != nil || out.Address != in.Address || out.To != "" {
		t.Fatalf("version 3 record: %+v, %v", out, err)
	}
	if got := len(in.AppendTo(nil)); got != in.Size() {
		t.Errorf("encoded %d bytes, size says %d", got, in.Size())
	}
	for _, bad := range [][]byte{
		nil,
		[]byte("not a heartbeat at all, but long enough to be one if it were"),
		in.AppendTo(nil)[:heartbeatV2Size+3],              // the role is cut short
		in.AppendTo(nil)[:heartbeatV2Size+len(in.Role)+1], // the address's length is cut short
		in.AppendTo(nil)[:heartbeatV3Size+len(in.Role)+1], // the address is cut short
		in.AppendTo(nil)[:in.Size()-len(in.To)-1],         // the target's length is cut short
		in.AppendTo(nil)[:in.Size()-1],                    // the target is cut short
		append([]byte{'N', 'L', 2}, make([]byte, heartbeatV1Size)...)[:heartbeatV2Size-1],
	} {
		if err := out.Decode(bad); err == nil {
			t.Errorf("decoded %q", bad)
		}
	}
}

// Any record decodes without a panic, and whatever decodes survives a round trip.
func FuzzHeartbeatDecode(f *testing.F) {
	for _, h := range []Heartbeat{{}, {Tenure: 1, Seq: 2, Token: 3, Role: "billing", Kind: KindReleased, Address: "host:1", To: "b"}} {
		f.Add(h.AppendTo(nil))
	}
	f.Add([]byte("NL\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Heartbeat
		if h.Decode(b) != nil {
			return
		}
		var again Heartbeat
		if err := again.Decode(h.AppendTo(nil)); err != nil || again != h {
			t.Fatalf("%x decoded to %+v, which re-encodes to %+v (%v)", b, h, again, err)
		}
	})
}
