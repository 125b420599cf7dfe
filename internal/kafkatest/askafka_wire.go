package kafkatest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kconn is a client connection as AsKafka sees it: kfake reads the client's requests from it and
// writes its answers to it, through an in-memory hand-over, while kconn reads the client's bytes
// from the real connection. Requests go to kfake one at a time, the next read from the client only
// once the previous one is answered: Kafka's SocketServer mutes a connection from a request until
// its response is sent (core/src/main/scala/kafka/network/SocketServer.scala), so this changes
// nothing a client can see, and it lets AsKafka hold a request, answer it itself, change kfake's
// answer, or ask kfake something on the same connection (so for the same principal) first.
type kconn struct {
	down net.Conn // toward the client
	k    *Kafka
	addr string // the listen address of the node the client reached

	toBroker   chan []byte // request frames, the client's or AsKafka's, for kfake to read
	fromBroker chan []byte // kfake's response frames
	pending    []byte      // what kfake has yet to read of the current request
	wbuf       []byte      // what kfake wrote that is not yet a whole response

	// turn is held while a request is with kfake, so that AsKafka's own requests on this
	// connection (ksession.go) wait for the client's and the reverse.
	turn     sync.Mutex
	clientID *string // the client's, for the requests AsKafka makes in its name

	sessionEnd       time.Time    // when the SASL session ends (KIP-368); zero if it does not
	reauthenticating bool         // a SaslHandshake began re-authentication of an ended session
	mechanism, user  string       // the SASL mechanism and user; user is "" without SASL
	lastActive       atomic.Int64 // UnixNano of the last read or write on the client's side
	idle             *time.Timer  // nil if connections are never idle for too long

	raw                  atomic.Bool // relaying bytes unread (TLS)
	downOnce, brokerOnce sync.Once
	downClosed           chan struct{} // the client's side is closed
	closed               chan struct{} // kfake's side is closed
}

var errClosed = errors.New("kafkatest: connection closed")

// klistener hands kfake kconns instead of the client's connections.
type klistener struct {
	net.Listener
	k *Kafka
}

func (l *klistener) Accept() (net.Conn, error) {
	down, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &kconn{
		down: down, k: l.k, addr: l.Addr().String(),
		toBroker: make(chan []byte), fromBroker: make(chan []byte, 1),
		downClosed: make(chan struct{}), closed: make(chan struct{}),
	}
	c.touch()
	if d := l.k.cfg.idle; d > 0 {
		// Armed only once assigned: idleCheck reads c.idle.
		c.idle = time.AfterFunc(time.Hour, c.idleCheck)
		c.idle.Reset(d)
	}
	go c.serve()
	return c, nil
}

// serve reads the client's requests, one at a time, and answers them.
func (c *kconn) serve() {
	defer c.closeDown()
	if c.idle != nil {
		defer c.idle.Stop()
	}
	var first [1]byte
	if _, err := io.ReadFull(c.down, first[:]); err != nil {
		return
	}
	if first[0] == tlsHandshake {
		c.relay(first[0])
		return
	}
	r := io.MultiReader(bytes.NewReader(first[:]), c.down)
	for {
		frame, err := readFrame(r)
		if err != nil {
			return
		}
		c.touch()
		if !c.passThrough(frame) {
			return
		}
		r = c.down
	}
}

// tlsHandshake begins a TLS connection. A Kafka request cannot begin with it: its size would be
// 369 MB or more.
const tlsHandshake = 0x16

// relay passes a connection's bytes to kfake and back unread: under kfake.TLS, kfake's TLS
// listener wraps this one, so what arrives here is encrypted.
func (c *kconn) relay(first byte) {
	c.raw.Store(true)
	buf := []byte{first}
	for {
		select {
		case c.toBroker <- buf:
		case <-c.closed:
			return
		}
		c.touch()
		buf = make([]byte, 16<<10)
		n, err := c.down.Read(buf)
		if err != nil {
			return
		}
		buf = buf[:n]
	}
}

// passThrough handles one request frame and writes its answer; false closes the connection.
func (c *kconn) passThrough(frame []byte) bool {
	x, err := newExchange(c, frame)
	if err != nil {
		// Not a Kafka request header.
		return false
	}
	c.turn.Lock()
	if c.clientID == nil {
		c.clientID = x.clientID
	}
	resp, keep := c.k.exchange(x)
	c.turn.Unlock()
	if !keep {
		return false
	}
	if resp == nil {
		return true
	}
	if _, err := c.down.Write(resp); err != nil {
		return false
	}
	c.touch()
	return true
}

// touch records activity for the idle timeout.
func (c *kconn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

// idleCheck closes the connection if nothing passed on it for connections.max.idle.ms. Kafka's
// Selector counts any read or write as activity and closes the connection idle the longest
// (clients/src/main/java/org/apache/kafka/common/network/Selector.java, maybeCloseOldestConnection).
// A request still with the broker (a held produce, a parked JoinGroup) is not idleness here.
func (c *kconn) idleCheck() {
	if !c.turn.TryLock() {
		c.idle.Reset(c.k.cfg.idle)
		return
	}
	c.turn.Unlock()
	if left := c.k.cfg.idle - time.Since(time.Unix(0, c.lastActive.Load())); left > 0 {
		c.idle.Reset(left)
		return
	}
	c.closeDown()
}

// roundTrip gives kfake one request frame and returns its answer, or nil if it sends none (acks=0
// produce). The caller holds turn.
func (c *kconn) roundTrip(frame []byte, answered bool) ([]byte, error) {
	select {
	case c.toBroker <- frame:
	case <-c.closed:
		return nil, errClosed
	}
	if !answered {
		return nil, nil
	}
	select {
	case r := <-c.fromBroker:
		return r, nil
	case <-c.closed:
		return nil, errClosed
	}
}

// Read is kfake reading a request.
func (c *kconn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		select {
		case f := <-c.toBroker:
			c.pending = f
		case <-c.closed:
			return 0, io.EOF
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write is kfake writing a response; kfake writes each whole, but any split works.
func (c *kconn) Write(p []byte) (int, error) {
	if c.raw.Load() {
		c.touch()
		return c.down.Write(p)
	}
	c.wbuf = append(c.wbuf, p...)
	for len(c.wbuf) >= 4 {
		n := 4 + int(binary.BigEndian.Uint32(c.wbuf))
		if len(c.wbuf) < n {
			break
		}
		frame := append([]byte(nil), c.wbuf[:n]...)
		c.wbuf = c.wbuf[n:]
		select {
		case c.fromBroker <- frame:
		case <-c.closed:
			return 0, errClosed
		}
	}
	return len(p), nil
}

// Close is kfake closing the connection: both sides go.
func (c *kconn) Close() error {
	c.closeBroker()
	c.closeDown()
	return nil
}

// closeDown closes the client's side. kfake's side goes with it unless a KIP-848 session still
// needs it (ksession.go), which then closes it.
func (c *kconn) closeDown() {
	c.downOnce.Do(func() {
		close(c.downClosed)
		c.down.Close()
		if !c.k.sessions.holds(c) {
			c.closeBroker()
		}
	})
}

func (c *kconn) closeBroker() {
	c.brokerOnce.Do(func() { close(c.closed) })
}

func (c *kconn) LocalAddr() net.Addr              { return c.down.LocalAddr() }
func (c *kconn) RemoteAddr() net.Addr             { return c.down.RemoteAddr() }
func (c *kconn) SetDeadline(time.Time) error      { return nil }
func (c *kconn) SetReadDeadline(time.Time) error  { return nil }
func (c *kconn) SetWriteDeadline(time.Time) error { return nil }

// readFrame reads one size-prefixed frame, the size included.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 100<<20 {
		return nil, errors.New("kafkatest: frame too large")
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// exchange is one request on a kconn and what AsKafka does with it.
type exchange struct {
	c        *kconn
	key      int16
	version  int16
	corr     int32
	clientID *string
	frame    []byte
	req      kmsg.Request // parsed by request()
}

func newExchange(c *kconn, frame []byte) (*exchange, error) {
	r := kbin.Reader{Src: frame[4:]}
	x := &exchange{c: c, frame: frame, key: r.Int16(), version: r.Int16(), corr: r.Int32(), clientID: r.NullableString()}
	return x, r.Complete()
}

// request parses the request, or returns nil if it does not parse (kfake will refuse it).
func (x *exchange) request() kmsg.Request {
	if x.req != nil {
		return x.req
	}
	req := kmsg.RequestForKey(x.key)
	if req == nil {
		return nil
	}
	req.SetVersion(x.version)
	r := kbin.Reader{Src: x.frame[4:]}
	r.Int16()
	r.Int16()
	r.Int32()
	r.NullableString()
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if r.Complete() != nil || req.ReadFrom(r.Src) != nil {
		return nil
	}
	x.req = req
	return req
}

// forwardRaw sends the request to kfake as the client sent it and returns kfake's answer frame.
func (x *exchange) forwardRaw() ([]byte, error) {
	answered := true
	if x.key == int16(kmsg.Produce) {
		if req, ok := x.request().(*kmsg.ProduceRequest); ok && req.Acks == 0 {
			answered = false
		}
	}
	return x.c.roundTrip(x.frame, answered)
}

// forward sends the request to kfake and returns its decoded answer.
func (x *exchange) forward() (kmsg.Response, error) {
	req := x.request()
	if req == nil {
		return nil, errors.New("kafkatest: request does not parse")
	}
	raw, err := x.forwardRaw()
	if err != nil || raw == nil {
		return nil, err
	}
	return decodeResponse(req, raw)
}

// answer encodes resp as the answer to this request.
func (x *exchange) answer(resp kmsg.Response) []byte {
	return encodeResponse(x.corr, resp)
}

// ask sends kfake a request of AsKafka's own on this connection, in the client's name, and
// returns the answer. The caller holds the connection's turn. Only requests that kfake answers
// without closing the connection may be asked: a version it serves, on an authenticated
// connection.
func (c *kconn) ask(req kmsg.Request) (kmsg.Response, error) {
	var opts []kmsg.RequestFormatterOpt
	if c.clientID != nil {
		opts = append(opts, kmsg.FormatterClientID(*c.clientID))
	}
	frame := kmsg.NewRequestFormatter(opts...).AppendRequest(nil, req, -1)
	raw, err := c.roundTrip(frame, true)
	if err != nil {
		return nil, err
	}
	return decodeResponse(req, raw)
}

func decodeResponse(req kmsg.Request, raw []byte) (kmsg.Response, error) {
	resp := req.ResponseKind()
	b := raw[8:] // size, correlation ID
	if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		r := kbin.Reader{Src: b}
		kmsg.SkipTags(&r)
		b = r.Src
	}
	return resp, resp.ReadFrom(b)
}

func encodeResponse(corr int32, resp kmsg.Response) []byte {
	buf := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(buf[4:], uint32(corr))
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}
