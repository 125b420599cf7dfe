package goneli

import (
	"encoding/binary"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A heartbeat written over goneli's own connection is a record batch that a broker accepts and a
// consumer reads back as the same key and value.
func TestRecordBatchEncoding(t *testing.T) {
	h := heartbeat{tenure: 7, seq: 3, sentWall: 1_800_000_000_000_000_000, sentMono: time.Second, role: "billing", address: "10.0.0.1:80"}
	key, value := []byte("node-a"), h.appendTo(nil)
	raw := recordBatch(key, [][]byte{value}, 1_800_000_000_123)
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if int(b.Length) != len(raw)-12 || b.Magic != 2 || b.NumRecords != 1 || b.ProducerID != -1 || b.FirstSequence != -1 ||
		b.PartitionLeaderEpoch != -1 || b.FirstTimestamp != 1_800_000_000_123 || b.MaxTimestamp != b.FirstTimestamp {
		t.Fatalf("batch %+v", b)
	}
	if crc := crc32.Checksum(raw[batchCRCAt+4:], crc32.MakeTable(crc32.Castagnoli)); uint32(b.CRC) != crc {
		t.Fatalf("CRC %x, want %x", uint32(b.CRC), crc)
	}
	n, w := binary.Varint(b.Records)
	if w <= 0 || int(n) != len(b.Records)-w {
		t.Fatalf("record length %d (%d bytes) of %d", n, w, len(b.Records))
	}
	var rec kmsg.Record
	if err := rec.ReadFrom(b.Records); err != nil {
		t.Fatal(err)
	}
	var got heartbeat
	if err := got.decode(rec.Value); err != nil || string(rec.Key) != "node-a" || got != h || rec.OffsetDelta != 0 || len(rec.Headers) != 0 {
		t.Fatalf("record %+v: %+v, %v", rec, got, err)
	}
}

// A cycle's heartbeats go to librdkafka for a lease after a round failed, and when heartbeats have
// waited behind a round under way for longer than queueFor.
func TestWireHeartbeatsUsable(t *testing.T) {
	const lease, queueFor = time.Second, 100 * time.Millisecond
	w := newWireHeartbeats(&wireDescriber{}, "t", lease/2, queueFor, &sync.WaitGroup{})
	if !w.usable(0, lease) {
		t.Fatal("not usable at first")
	}
	w.queued = []wireBeat{{h: &heartbeat{sentMono: 2 * time.Second}}}
	if !w.usable(2*time.Second+queueFor-time.Millisecond, lease) {
		t.Fatal("not usable while heartbeats have waited for less than queueFor")
	}
	if w.usable(2*time.Second+queueFor, lease) {
		t.Fatal("usable while heartbeats have waited for queueFor")
	}
	w.queued = nil
	w.fail(5 * time.Second)
	for _, c := range []struct {
		now  time.Duration
		want bool
	}{{5 * time.Second, false}, {6*time.Second - time.Millisecond, false}, {6 * time.Second, true}} {
		if got := w.usable(c.now, lease); got != c.want {
			t.Errorf("usable at %v after a failure at 5s: %v, want %v", c.now, got, c.want)
		}
	}
}

// Several heartbeats of one partition go in one batch, in order.
func TestRecordBatchOfSeveral(t *testing.T) {
	raw := recordBatch([]byte("k"), [][]byte{[]byte("one"), []byte("two")}, 1)
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if b.NumRecords != 2 || b.LastOffsetDelta != 1 {
		t.Fatalf("batch %+v", b)
	}
	rest := b.Records
	for i, want := range []string{"one", "two"} {
		n, w := binary.Varint(rest)
		var rec kmsg.Record
		if err := rec.ReadFrom(rest[:w+int(n)]); err != nil || string(rec.Value) != want || rec.OffsetDelta != int32(i) {
			t.Fatalf("record %d: %+v, %v", i, rec, err)
		}
		rest = rest[w+int(n):]
	}
}

// A closed set of connections starts no round.
func TestWireHeartbeatsClosed(t *testing.T) {
	w := newWireHeartbeats(&wireDescriber{servers: []string{"127.0.0.1:1"}}, "t", time.Second, time.Millisecond, &sync.WaitGroup{})
	w.close()
	if w.start([]wireBeat{{p: &part{}}, {p: &part{id: 1}}}) {
		t.Fatal("a round started after close")
	}
}
