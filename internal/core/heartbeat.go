package core

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// A heartbeat is one record on a partition of the leader topic. Its key is the sender's Name; its
// value is a binary layout, big-endian, of 56 bytes plus the role's name and the leader's address:
//
//	0   2  magic "NL"
//	2   1  version (3)
//	3   8  tenure id, random per assignment of the partition
//	11  8  sequence number within the tenure, from 1
//	19  8  send time, Unix nanoseconds (wall clock, for observers and logs)
//	27  8  send time on the sender's monotonic clock, nanoseconds since its instance started
//	35  8  tenure start, Unix nanoseconds (0 until the tenure first acquired)
//	43  8  fencing token, one more than the partition offset of the tenure's first confirmed heartbeat (0 until then)
//	51  1  kind: 0 a heartbeat, 1 the tenure is releasing the partition, 2 the tenure has released it
//	52  2  length of the role's name
//	54  n  the role's name (empty for the single leader of New)
//	+0  2  length of the sender's Config.Address
//	+2  m  the address (empty if none is set)
//	+0  2  length of the transfer's target (version 4)
//	+2  k  the target's sanitised Name: on a release marker, the member the tenure hands over to
//	       (Curator.TransferTo); on a transfer request, the member asked for; empty otherwise
//
// Version 1 records end at byte 51 and are heartbeats of the unnamed role; version 2 records end
// after the role's name and carry no address; version 3 records end after the address. Each
// version only appends to the one before, so instances of different versions read one another's
// records by the prefix they know.
//
// The monotonic send time means nothing to other processes; the sender uses it to date its own
// heartbeats when they come back, so that wall-clock steps cannot stretch a lease.
type Heartbeat struct {
	Tenure   uint64
	Seq      uint64
	SentWall int64
	SentMono time.Duration
	Since    int64
	Token    int64
	Kind     RecordKind
	Role     string
	Address  string
	To       string // version 4: the transfer's target (internal/driver, transfer.go)
}

// recordKind tells heartbeats from the markers a tenure writes when it gives its partition up.
type RecordKind uint8

const (
	// kindHeartbeat renews the sender's lease once it comes back and its offset is committed.
	KindHeartbeat RecordKind = iota
	// kindReleasing says that the tenure's partition was revoked while its barrier was still
	// busy with the revocation: a successor waits for kindReleased (see lease.released).
	KindReleasing
	// kindReleased says that the barrier has returned from the tenure's LeaderRevoked.
	KindReleased
	// kindTransfer asks the partition's leader to hand over to the member named in the record's
	// target (goneli.Transfer, `neli transfer`). Any client may write one; see internal/driver, transfer.go.
	KindTransfer
)

const (
	heartbeatVersion = 4
	heartbeatV1Size  = 51
	heartbeatV2Size  = 54 // without the role's name
	heartbeatV3Size  = 56 // without the role's name and the address
	HeartbeatSize    = 58 // without the role's name, the address and the target
	MaxRoleName      = 255
)

var errNotHeartbeat = errors.New("goneli: not a heartbeat record")

func (h *Heartbeat) AppendTo(b []byte) []byte {
	b = append(b, 'N', 'L', heartbeatVersion)
	b = binary.BigEndian.AppendUint64(b, h.Tenure)
	b = binary.BigEndian.AppendUint64(b, h.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(h.SentWall))
	b = binary.BigEndian.AppendUint64(b, uint64(h.SentMono))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Since))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Token))
	b = append(b, byte(h.Kind))
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Role)))
	b = append(b, h.Role...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Address)))
	b = append(b, h.Address...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.To)))
	return append(b, h.To...)
}

// size is the length of the encoded record.
func (h *Heartbeat) Size() int {
	return HeartbeatSize + len(h.Role) + len(h.Address) + len(h.To)
}

// decode reads a heartbeat of any version. A later version is read by its version 4 prefix.
func (h *Heartbeat) Decode(b []byte) error {
	if len(b) < heartbeatV1Size || b[0] != 'N' || b[1] != 'L' || b[2] < 1 {
		return errNotHeartbeat
	}
	h.Tenure = binary.BigEndian.Uint64(b[3:])
	h.Seq = binary.BigEndian.Uint64(b[11:])
	h.SentWall = int64(binary.BigEndian.Uint64(b[19:]))
	h.SentMono = time.Duration(binary.BigEndian.Uint64(b[27:]))
	h.Since = int64(binary.BigEndian.Uint64(b[35:]))
	h.Token = int64(binary.BigEndian.Uint64(b[43:]))
	h.Kind, h.Role, h.Address, h.To = KindHeartbeat, "", "", ""
	if b[2] == 1 {
		return nil
	}
	if len(b) < heartbeatV2Size {
		return errNotHeartbeat
	}
	h.Kind = RecordKind(b[51])
	var ok bool
	at := 52
	if h.Role, at, ok = lengthPrefixed(b, at); !ok {
		return errNotHeartbeat
	}
	if b[2] == 2 {
		return nil
	}
	if h.Address, at, ok = lengthPrefixed(b, at); !ok {
		return errNotHeartbeat
	}
	if b[2] == 3 {
		return nil
	}
	if h.To, _, ok = lengthPrefixed(b, at); !ok {
		return errNotHeartbeat
	}
	return nil
}

// lengthPrefixed reads the string whose two-byte length is at b[at:], and returns it with the
// index after it; ok is false if b ends before it does.
func lengthPrefixed(b []byte, at int) (s string, next int, ok bool) {
	if len(b) < at+2 {
		return "", at, false
	}
	next = at + 2 + int(binary.BigEndian.Uint16(b[at:]))
	if len(b) < next {
		return "", at, false
	}
	return string(b[at+2 : next]), next, true
}

func (k RecordKind) String() string {
	switch k {
	case KindHeartbeat:
		return "heartbeat"
	case KindReleasing:
		return "releasing"
	case KindReleased:
		return "released"
	case KindTransfer:
		return "transfer"
	}
	return "kind " + strconv.Itoa(int(k))
}
