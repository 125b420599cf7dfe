package goneli

import (
	"testing"
)

// Records round-trip; a version 1 record (51 bytes, no kind or role) reads as a heartbeat of the
// unnamed role, a version 2 record (no address) as one without an address and a version 3 record
// (no transfer target) as one without a target, so that instances of earlier versions and this one
// read each other.
func TestHeartbeatRecords(t *testing.T) {
	in := heartbeat{tenure: 1, seq: 2, sentWall: 3, sentMono: 4, since: 5, token: 6, kind: kindReleasing, role: "billing", address: "http://10.0.0.7:8080", to: "b-2"}
	var out heartbeat
	if err := out.decode(in.appendTo(nil)); err != nil || out != in {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, in)
	}
	plain := heartbeat{tenure: 1, seq: 2, sentWall: 3, sentMono: 4, since: 5, token: 6}
	v1 := plain.appendTo(nil)[:heartbeatV1Size]
	v1[2] = 1
	if err := out.decode(v1); err != nil || out.kind != kindHeartbeat || out.role != "" || out.token != 6 {
		t.Fatalf("version 1 record: %+v, %v", out, err)
	}
	v2 := in.appendTo(nil)[:heartbeatV2Size+len(in.role)]
	v2[2] = 2
	if err := out.decode(append(v2, "future fields"...)); err != nil || out.kind != in.kind || out.role != in.role || out.address != "" {
		t.Fatalf("version 2 record: %+v, %v", out, err)
	}
	v3 := in.appendTo(nil)[:in.size()-2-len(in.to)]
	v3[2] = 3
	if err := out.decode(append(v3, "future fields"...)); err != nil || out.address != in.address || out.to != "" {
		t.Fatalf("version 3 record: %+v, %v", out, err)
	}
	if got := len(in.appendTo(nil)); got != in.size() {
		t.Errorf("encoded %d bytes, size says %d", got, in.size())
	}
	for _, bad := range [][]byte{
		nil,
		[]byte("not a heartbeat at all, but long enough to be one if it were"),
		in.appendTo(nil)[:heartbeatV2Size+3],              // the role is cut short
		in.appendTo(nil)[:heartbeatV2Size+len(in.role)+1], // the address's length is cut short
		in.appendTo(nil)[:heartbeatV3Size+len(in.role)+1], // the address is cut short
		in.appendTo(nil)[:in.size()-len(in.to)-1],         // the target's length is cut short
		in.appendTo(nil)[:in.size()-1],                    // the target is cut short
		append([]byte{'N', 'L', 2}, make([]byte, heartbeatV1Size)...)[:heartbeatV2Size-1],
	} {
		if err := out.decode(bad); err == nil {
			t.Errorf("decoded %q", bad)
		}
	}
}

// Any record decodes without a panic, and whatever decodes survives a round trip.
func FuzzHeartbeatDecode(f *testing.F) {
	for _, h := range []heartbeat{{}, {tenure: 1, seq: 2, token: 3, role: "billing", kind: kindReleased, address: "host:1", to: "b"}} {
		f.Add(h.appendTo(nil))
	}
	f.Add([]byte("NL\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h heartbeat
		if h.decode(b) != nil {
			return
		}
		var again heartbeat
		if err := again.decode(h.appendTo(nil)); err != nil || again != h {
			t.Fatalf("%x decoded to %+v, which re-encodes to %+v (%v)", b, h, again, err)
		}
	})
}
