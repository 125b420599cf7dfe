package realkafka

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
)

// Proxy relays TCP connections from a loopback port of its own to a target address, and cuts them
// off as a network partition would: while cut, nothing passes in either direction, yet no
// connection is closed or refused, so that each side sees only silence; bytes already sent wait,
// as a sender's unacknowledged segments do, and go through when the cut heals.
//
// A Kafka client goes around a plain proxy: it bootstraps there, then connects to the addresses
// that the brokers advertise. So each node must advertise the proxy's address on a listener that
// only the proxied client uses (Options.Listeners), and the proxy relays to that listener: make
// the proxy first, give its Addr as the listener's Advertise, and SetTarget once the cluster runs.
type Proxy struct {
	l    net.Listener
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu     sync.Mutex
	target string
	// observe, if set, sees every request that clients send through the proxy (ObserveRequests).
	observe func(request []byte)
	healed  chan struct{} // closed: traffic passes; open: cut until Heal closes it
	conns   map[net.Conn]struct{}
	closed  bool
}

// NewProxy listens on a free loopback port. It relays nothing until SetTarget.
func NewProxy() (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{l: l, done: make(chan struct{}), healed: healed, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// SetTarget sets the address that connections made from now on are relayed to.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// ObserveRequests has f called with every Kafka request that a client sends through the proxy
// from now on, before it is relayed: the request as it goes on the wire after its 4-byte size (its
// header, then its body). A broker counts requests only in its JMX metrics, which a test cannot
// read without an agent in the JVM; the proxy sees them all, since a client that bootstraps there
// sends everything there (see Proxy). f runs on the connection's relaying goroutine, one request at
// a time per connection, and must return quickly; it must not keep the slice.
func (p *Proxy) ObserveRequests(f func(request []byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observe = f
}

// Cut stops all traffic through the proxy, on the connections it relays and on those made until
// Heal, which it accepts but does not relay. It returns when the cut is in place: a byte read from
// either side after it is held until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
		p.healed = make(chan struct{})
	default: // cut already
	}
}

// Heal lets traffic pass again, what was held first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
	default:
		close(p.healed)
	}
}

// pass waits until traffic may pass, and reports false if the proxy closed first.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	select {
	case <-healed:
		return true
	case <-p.done:
		return false
	}
}

// Close closes the proxy's port and every connection it relays, and returns once its goroutines
// have ended. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	err := p.l.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track adds c to the connections that Close closes, or closes it if the proxy has closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.relay(c)
	}
}

// relay connects c to the target, once traffic may pass, and copies both ways until either side
// closes; then it closes both.
func (p *Proxy) relay(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	if !p.pass() {
		return
	}
	p.mu.Lock()
	target, observe := p.target, p.observe
	p.mu.Unlock()
	if target == "" {
		return
	}
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	var wg sync.WaitGroup
	wg.Add(2)
	var requests func([]byte)
	if observe != nil {
		requests = (&frames{each: observe}).add
	}
	go func() { defer wg.Done(); p.pump(up, c, requests) }()
	go func() { defer wg.Done(); p.pump(c, up, nil) }()
	wg.Wait()
}

// frames cuts a client's byte stream into Kafka requests, each a 4-byte big-endian size and then
// that many bytes, and hands each whole one to each.
type frames struct {
	each func([]byte)
	buf  []byte
}

func (f *frames) add(b []byte) {
	f.buf = append(f.buf, b...)
	for len(f.buf) >= 4 {
		size := int(binary.BigEndian.Uint32(f.buf))
		if len(f.buf) < 4+size {
			return
		}
		f.each(f.buf[4 : 4+size])
		f.buf = f.buf[4+size:]
	}
	if len(f.buf) == 0 {
		f.buf = nil // the next request starts a fresh buffer rather than growing an old one
	}
}

// pump copies src to dst, holding each read while the proxy is cut, and hands what it read to
// seen, if set, before relaying it. When either side ends it closes both, which ends the pump of
// the other direction too.
func (p *Proxy) pump(dst, src net.Conn, seen func([]byte)) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if seen != nil {
				seen(buf[:n])
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
