package sidechan

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A record batch that a broker accepts, which a consumer reads back as the same key and value.
func TestRecordBatchEncoding(t *testing.T) {
	key, value := []byte("node-a"), []byte("a heartbeat")
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
	if string(rec.Key) != "node-a" || string(rec.Value) != "a heartbeat" || rec.OffsetDelta != 0 || len(rec.Headers) != 0 {
		t.Fatalf("record %+v", rec)
	}
}

// Several records of one partition go in one batch, in order.
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
