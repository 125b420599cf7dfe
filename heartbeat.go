package goneli

import (
	"encoding/binary"
	"errors"
	"time"
)

// A heartbeat is one record on partition 0 of the leader topic. Its key is the sender's Name; its
// value is a fixed 51-byte binary layout, big-endian:
//
//	0   2  magic "NL"
//	2   1  version (1)
//	3   8  tenure id, random per assignment of partition 0
//	11  8  sequence number within the tenure, from 1
//	19  8  send time, Unix nanoseconds (wall clock, for observers and logs)
//	27  8  send time on the sender's monotonic clock, nanoseconds since its instance started
//	35  8  tenure start, Unix nanoseconds (0 until the tenure first acquired)
//	43  8  fencing token, one more than the partition-0 offset of the tenure's first confirmed heartbeat (0 until then)
//
// The monotonic send time means nothing to other processes; the sender uses it to date its own
// heartbeats when they come back, so that wall-clock steps cannot stretch a lease.
type heartbeat struct {
	tenure   uint64
	seq      uint64
	sentWall int64
	sentMono time.Duration
	since    int64
	token    int64
}

const (
	heartbeatVersion = 1
	heartbeatSize    = 51
)

var errNotHeartbeat = errors.New("goneli: not a heartbeat record")

func (h *heartbeat) appendTo(b []byte) []byte {
	b = append(b, 'N', 'L', heartbeatVersion)
	b = binary.BigEndian.AppendUint64(b, h.tenure)
	b = binary.BigEndian.AppendUint64(b, h.seq)
	b = binary.BigEndian.AppendUint64(b, uint64(h.sentWall))
	b = binary.BigEndian.AppendUint64(b, uint64(h.sentMono))
	b = binary.BigEndian.AppendUint64(b, uint64(h.since))
	b = binary.BigEndian.AppendUint64(b, uint64(h.token))
	return b
}

// decode reads a heartbeat. Records of a later version are accepted as long as they keep the
// version 1 prefix, so that mixed-version groups still recognise one another's heartbeats.
func (h *heartbeat) decode(b []byte) error {
	if len(b) < heartbeatSize || b[0] != 'N' || b[1] != 'L' || b[2] < heartbeatVersion {
		return errNotHeartbeat
	}
	h.tenure = binary.BigEndian.Uint64(b[3:])
	h.seq = binary.BigEndian.Uint64(b[11:])
	h.sentWall = int64(binary.BigEndian.Uint64(b[19:]))
	h.sentMono = time.Duration(binary.BigEndian.Uint64(b[27:]))
	h.since = int64(binary.BigEndian.Uint64(b[35:]))
	h.token = int64(binary.BigEndian.Uint64(b[43:]))
	return nil
}
