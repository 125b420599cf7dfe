package kafkatest

import (
	"encoding/binary"
	"maps"
	"net"
	"sync"
)

// Wire counts, by client.id and request key, the requests that clients send and the broker has not
// answered yet, as they cross the broker's sockets. The broker reads a connection's next request
// only once it has answered the one before (kfake, as Apache Kafka, processes a connection's
// requests one at a time), so requests a client pipelines wait in the socket, where kfake's own
// view of a request (a control function) cannot see them; Wire reads each connection eagerly into
// a buffer of its own and counts a request the moment it arrives, and its answer the moment the
// broker writes it.
//
// Give the broker ListenFn(w.Listen(listen)), listen being what it would listen with otherwise
// (a Netem's Listen, say): kfake.ListenFn given after Start's defaults replaces Netem's.
type Wire struct {
	mu    sync.Mutex
	open  map[WireKey]int   // sent and unanswered
	most  map[WireKey]int   // the most open at once since the last Reset
	total map[WireKey]int64 // sent, ever
}

// WireKey names one kind of request of one client.
type WireKey struct {
	Client string
	Key    int16
}

// NewWire returns a Wire that has counted nothing.
func NewWire() *Wire {
	return &Wire{open: map[WireKey]int{}, most: map[WireKey]int{}, total: map[WireKey]int64{}}
}

// Listen wraps listen so that every connection it accepts is counted.
func (w *Wire) Listen(listen func(network, address string) (net.Listener, error)) func(network, address string) (net.Listener, error) {
	return func(network, address string) (net.Listener, error) {
		ln, err := listen(network, address)
		if err != nil {
			return nil, err
		}
		return &wireListener{Listener: ln, w: w}, nil
	}
}

// Most returns, for every client and key, the most requests open at once since the last Reset.
func (w *Wire) Most() map[WireKey]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.most)
}

// Totals returns, for every client and key, the requests sent so far.
func (w *Wire) Totals() map[WireKey]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.total)
}

// Reset starts the maxima again from what is open now.
func (w *Wire) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.most = maps.Clone(w.open)
}

func (w *Wire) sent(k WireKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.open[k]++
	w.total[k]++
	w.most[k] = max(w.most[k], w.open[k])
}

func (w *Wire) answered(k WireKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open[k] > 0 {
		w.open[k]--
	}
}

type wireListener struct {
	net.Listener
	w *Wire
}

func (l *wireListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	wc := &wireConn{Conn: c, w: l.w, corr: map[int32]WireKey{}}
	wc.cond = sync.NewCond(&wc.mu)
	go wc.fill()
	return wc, nil
}

// wireConn reads its connection eagerly (fill) and hands the bytes to the broker as it asks.
type wireConn struct {
	net.Conn
	w *Wire

	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte // read, not yet handed to the broker
	err    error  // what ended fill
	reqs   []byte // requests read, not yet parsed whole
	corr   map[int32]WireKey
	resps  []byte // answers written, not yet parsed whole
	closed bool
}

// fill reads the connection as fast as the client writes, counting each request it completes.
func (c *wireConn) fill() {
	chunk := make([]byte, 64<<10)
	for {
		n, err := c.Conn.Read(chunk)
		c.mu.Lock()
		if n > 0 {
			c.buf = append(c.buf, chunk[:n]...)
			c.reqs = append(c.reqs, chunk[:n]...)
			c.parseRequests()
		}
		if err != nil {
			c.err = err
		}
		c.cond.Broadcast()
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// parseRequests counts every whole request in reqs: size, api key, version, correlation id, then
// the client.id as an int16-length string. Called with mu held.
func (c *wireConn) parseRequests() {
	for len(c.reqs) >= 4 {
		size := int(binary.BigEndian.Uint32(c.reqs))
		if len(c.reqs) < 4+size {
			return
		}
		frame := c.reqs[4 : 4+size]
		c.reqs = c.reqs[4+size:]
		if len(frame) < 10 {
			continue
		}
		key := int16(binary.BigEndian.Uint16(frame))
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		client := ""
		if n := int(int16(binary.BigEndian.Uint16(frame[8:]))); n > 0 && 10+n <= len(frame) {
			client = string(frame[10 : 10+n])
		}
		k := WireKey{Client: client, Key: key}
		c.corr[corr] = k
		c.w.sent(k)
	}
	if len(c.reqs) == 0 {
		c.reqs = nil
	}
}

func (c *wireConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.buf) == 0 && c.err == nil && !c.closed {
		c.cond.Wait()
	}
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	if c.err != nil {
		return 0, c.err
	}
	return 0, net.ErrClosed
}

// Write counts each answer as the broker writes it: size, then the correlation id.
func (c *wireConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.resps = append(c.resps, p...)
	for len(c.resps) >= 8 {
		size := int(binary.BigEndian.Uint32(c.resps))
		if len(c.resps) < 4+size {
			break
		}
		corr := int32(binary.BigEndian.Uint32(c.resps[4:]))
		c.resps = c.resps[4+size:]
		if k, ok := c.corr[corr]; ok {
			delete(c.corr, corr)
			c.w.answered(k)
		}
	}
	if len(c.resps) == 0 {
		c.resps = nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *wireConn) Close() error {
	c.mu.Lock()
	c.closed = true
	// A connection that closes answers nothing more: what it had open is no longer in flight.
	for corr, k := range c.corr {
		delete(c.corr, corr)
		c.w.answered(k)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.Conn.Close()
}
