package kafkatest

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Requests that a client pipelines on one connection wait in the socket while the broker answers
// the first, and the Wire counts them all in flight from the moment they arrive until each is
// answered. The test writes the three requests itself, back to back on one connection before
// reading any answer: whether kgo pipelines three concurrent requests is kgo's to decide (under
// .ci/stress it sometimes sent the second only after the first was answered).
func TestWireCountsPipelinedRequests(t *testing.T) {
	w := NewWire()
	nm := NewNetem()
	b, err := StartNet(nm, kfake.ListenFn(w.Listen(nm.Listen)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 3
	key := WireKey{Client: "piper", Key: int16(kmsg.ListGroups)}
	var held bool
	b.ControlKey(int16(kmsg.ListGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held {
			return nil, nil, false
		}
		held = true
		// The first answer waits until the others have arrived behind it.
		b.SleepControl(func() {
			for deadline := time.Now().Add(10 * time.Second); w.Most()[key] < n && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
		})
		return nil, nil, false
	})
	conn, err := net.DialTimeout("tcp", b.Addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("piper"))
	var out []byte
	for i := range n {
		req := kmsg.NewPtrListGroupsRequest()
		req.SetVersion(3)
		// AppendRequest writes the size at the start of what it is given: one request each.
		out = append(out, f.AppendRequest(nil, req, int32(i))...)
	}
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		var size [4]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(conn, body); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if got := int32(binary.BigEndian.Uint32(body)); got != int32(i) {
			t.Fatalf("answer %d has correlation id %d", i, got)
		}
	}
	if most, total := w.Most()[key], w.Totals()[key]; most != n || total != n {
		t.Errorf("%d list-groups requests in flight at most, %d sent; want %d and %d", most, total, n, n)
	}
	w.Reset()
	if most := w.Most()[key]; most != 0 {
		t.Errorf("%d requests still in flight after every answer, want 0", most)
	}
}
