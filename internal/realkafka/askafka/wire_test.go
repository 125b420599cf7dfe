// Package askafka checks the embedded broker's AsKafka (internal/kafkatest) against Apache Kafka
// itself (internal/realkafka): each request whose answer AsKafka changes, and each behaviour that
// goneli's own connection (internal/sidechan) and the doctor rely on, goes to a real broker and to
// kfake AsKafka, and the answers are compared field by field. A difference fails the test unless
// the case argues it (a comment and the reason it logs).
//
// It lives in the realkafka module, which only goneli's tests use, so that kfake, which the
// comparison needs beside the real broker, stays out of the root module's graph and out of that of
// a program whose tests use nelitest.
package askafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// await bounds every wait on a broker, so that a broken one fails the test instead of hanging it.
const await = time.Minute

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), await)
	t.Cleanup(cancel)
	return ctx
}

// wire is a connection to one node that sends each request at the version given, as it is: no
// client library picks versions, routes, retries or hides an error, so both brokers get the same
// bytes.
type wire struct {
	t    *testing.T
	name string // the side's
	conn net.Conn
	corr int32
}

func (s *side) dial(t *testing.T) *wire {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: dialling %s: %v", s.name, s.addr, err)
	}
	t.Cleanup(func() { c.Close() })
	w := &wire{t: t, name: s.name, conn: c}
	if s.admin != nil {
		w.authenticate(*s.admin)
	}
	return w
}

// dialAs is a connection to the side's SASL listener authenticated as who.
func (s *side) dialAs(t *testing.T, who credentials) *wire {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.saslAddr, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: dialling %s: %v", s.name, s.saslAddr, err)
	}
	t.Cleanup(func() { c.Close() })
	w := &wire{t: t, name: s.name + " as " + who.user, conn: c}
	w.authenticate(who)
	return w
}

// authenticate authenticates the connection with SASL/PLAIN (RFC 4616: an empty authorisation
// identity, the user and the password, each after a NUL), as librdkafka does.
func (w *wire) authenticate(who credentials) {
	w.t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	if c := w.send(hs, 1).(*kmsg.SASLHandshakeResponse).ErrorCode; c != 0 {
		w.t.Fatalf("%s: SASLHandshake: %s", w.name, code(c))
	}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SASLAuthBytes = []byte("\x00" + who.user + "\x00" + who.pass)
	if r := w.send(auth, 2).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != 0 {
		w.t.Fatalf("%s: SASLAuthenticate as %s: %s %s", w.name, who.user, code(r.ErrorCode), str(r.ErrorMessage))
	}
}

// send sends req at version and returns the answer; a connection that fails fails the test.
func (w *wire) send(req kmsg.Request, version int16) kmsg.Response {
	w.t.Helper()
	resp, err := w.try(req, version)
	if err != nil {
		w.t.Fatalf("%s: %s v%d: %v", w.name, kmsg.NameForKey(req.Key()), version, err)
	}
	return resp
}

// try is send that returns the connection's error.
func (w *wire) try(req kmsg.Request, version int16) (kmsg.Response, error) {
	req.SetVersion(version)
	w.corr++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("askafka-check")).AppendRequest(nil, req, w.corr)
	if err := w.conn.SetDeadline(time.Now().Add(await)); err != nil {
		return nil, err
	}
	if _, err := w.conn.Write(frame); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(w.conn, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(w.conn, body); err != nil {
		return nil, err
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != w.corr {
		return nil, fmt.Errorf("answer to request %d, want %d", corr, w.corr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(version)
	if resp.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		body = r.Src
	}
	return resp, resp.ReadFrom(body)
}

// closed waits up to d for the broker to close the connection, reading nothing else, and reports
// whether it did.
func (w *wire) closed(d time.Duration) bool {
	if err := w.conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false
	}
	var b [1]byte
	_, err := w.conn.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// obs is what a case saw of one broker: fields by name, each rendered as text.
type obs struct {
	fields map[string]string
	order  []string
}

func newObs() *obs { return &obs{fields: map[string]string{}} }

// set records field; a field set twice keeps the last value.
func (o *obs) set(field string, format string, args ...any) {
	if _, ok := o.fields[field]; !ok {
		o.order = append(o.order, field)
	}
	o.fields[field] = fmt.Sprintf(format, args...)
}

// diff lists the fields whose values differ, in the order the real broker's case set them, then
// those only AsKafka's set.
func diff(real, as *obs) []difference {
	var out []difference
	fields := slices.Clone(real.order)
	for _, f := range as.order {
		if _, ok := real.fields[f]; !ok {
			fields = append(fields, f)
		}
	}
	for _, f := range fields {
		r, rok := real.fields[f]
		a, aok := as.fields[f]
		if !rok {
			r = "(not set)"
		}
		if !aok {
			a = "(not set)"
		}
		if r != a {
			out = append(out, difference{f, r, a})
		}
	}
	return out
}

func (o *obs) String() string {
	var sb strings.Builder
	for _, f := range o.order {
		fmt.Fprintf(&sb, "\n  %s: %s", f, o.fields[f])
	}
	return sb.String()
}

// ops renders a KIP-430 authorized operations bitfield as the operations' names.
func ops(bits int32) string {
	if bits == -2147483648 {
		return "unset"
	}
	var names []string
	for op := kmsg.ACLOperation(0); op < 32; op++ {
		if bits&(1<<op) != 0 {
			names = append(names, op.String())
		}
	}
	sort.Strings(names)
	return "[" + strings.Join(names, " ") + "]"
}

// code renders a Kafka error code as its name.
func code(c int16) string {
	if c == 0 {
		return "NONE"
	}
	if e, ok := kerr.ErrorForCode(c).(*kerr.Error); ok {
		return e.Message
	}
	return fmt.Sprintf("code %d", c)
}

func str(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}

// recordBatch is a record batch (magic 2) of one record with value, outside any transaction.
func recordBatch(value string) []byte { return producerBatch(value, -1, -1, false) }

// producerBatch is a record batch (magic 2) of one record with value from a producer (id -1: none),
// its first, inside that producer's transaction if txn.
func producerBatch(value string, producerID int64, epoch int16, txn bool) []byte {
	rec := kmsg.NewRecord()
	rec.Value = []byte(value)
	// The record's length counts what follows it: its encoding less the one-byte varint of 0.
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	b := kmsg.NewRecordBatch()
	b.Magic, b.ProducerID, b.ProducerEpoch, b.FirstSequence = 2, producerID, epoch, -1
	if producerID >= 0 {
		b.FirstSequence = 0
	}
	if txn {
		b.Attributes = 0x10 // the transactional bit (DefaultRecordBatch.TRANSACTIONAL_FLAG_MASK)
	}
	b.NumRecords, b.Records = 1, rec.AppendTo(nil)
	enc := b.AppendTo(nil)
	// Length counts from the partition leader epoch on; the CRC (Castagnoli) covers what follows it.
	binary.BigEndian.PutUint32(enc[8:], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:], crc32.Checksum(enc[21:], crc32.MakeTable(crc32.Castagnoli)))
	return enc
}
