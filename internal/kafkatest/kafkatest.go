// Package kafkatest runs an in-process Kafka-protocol broker (kfake) for goneli's tests, demo and
// benchmarks, with a network layer that can cut, black-hole or slow down one client, recognised by
// the client.id in its requests.
package kafkatest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is a single-node kfake cluster whose connections pass through a Netem.
type Broker struct {
	*kfake.Cluster
	Net  *Netem
	Addr string
}

// DefaultGroupMinSessionTimeout is lowered from Kafka's 6 s so that tests can use short leases.
const DefaultGroupMinSessionTimeout = 500 * time.Millisecond

// Start runs a one-broker cluster on a free loopback port (or the port given with kfake.Ports).
// Options given here are applied after the defaults.
func Start(opts ...kfake.Opt) (*Broker, error) {
	nm := NewNetem()
	all := append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(DefaultGroupMinSessionTimeout),
		kfake.ListenFn(nm.Listen),
	}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, err
	}
	return &Broker{Cluster: c, Net: nm, Addr: c.ListenAddrs()[0]}, nil
}

// Close stops the broker and drops every connection.
func (b *Broker) Close() {
	b.Cluster.Close()
	b.Net.closeAll()
}

// Fault is what Netem does to one client's connections.
type Fault int

const (
	// None lets traffic through.
	None Fault = iota
	// Refuse resets the client's connections and closes new ones as soon as they identify
	// themselves, the way a firewall rejecting packets looks to the client.
	Refuse
	// Blackhole delivers nothing in either direction, the way a silent partition looks: the client
	// only notices through its own timeouts. Healing closes the stalled connections.
	Blackhole
	// Delay adds latency to everything the client sends.
	Delay
)

// Netem tracks the broker's server-side connections by client.id and applies faults to them.
type Netem struct {
	mu     sync.Mutex
	faults map[string]fault
	conns  map[*conn]struct{}
}

type fault struct {
	kind  Fault
	delay time.Duration
	heal  chan struct{} // closed when this fault ends
}

// NewNetem returns a Netem that lets everything through.
func NewNetem() *Netem {
	return &Netem{faults: map[string]fault{}, conns: map[*conn]struct{}{}}
}

// Listen is a kfake.ListenFn.
func (nm *Netem) Listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: ln, nm: nm}, nil
}

// Cut applies kind to every connection of clientID, present and future.
func (nm *Netem) Cut(clientID string, kind Fault) {
	nm.set(clientID, fault{kind: kind, heal: make(chan struct{})})
}

// Slow delays everything clientID sends by d.
func (nm *Netem) Slow(clientID string, d time.Duration) {
	nm.set(clientID, fault{kind: Delay, delay: d, heal: make(chan struct{})})
}

// Heal ends any fault on clientID. Black-holed connections are closed, since the bytes they lost
// have left them unusable; the client reconnects.
func (nm *Netem) Heal(clientID string) {
	nm.set(clientID, fault{kind: None})
}

func (nm *Netem) set(clientID string, f fault) {
	nm.mu.Lock()
	old, had := nm.faults[clientID]
	if f.kind == None {
		delete(nm.faults, clientID)
	} else {
		nm.faults[clientID] = f
	}
	var victims []*conn
	for c := range nm.conns {
		if c.clientID == clientID && (f.kind == Refuse || (had && old.kind == Blackhole)) {
			victims = append(victims, c)
		}
	}
	nm.mu.Unlock()
	if had {
		close(old.heal)
	}
	for _, c := range victims {
		c.Close()
	}
}

func (nm *Netem) faultFor(clientID string) fault {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return nm.faults[clientID]
}

func (nm *Netem) closeAll() {
	nm.mu.Lock()
	var all []*conn
	for c := range nm.conns {
		all = append(all, c)
	}
	nm.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

type listener struct {
	net.Listener
	nm *Netem
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, nm: l.nm, closed: make(chan struct{})}
	l.nm.mu.Lock()
	l.nm.conns[c] = struct{}{}
	l.nm.mu.Unlock()
	return c, nil
}

type conn struct {
	net.Conn
	nm        *Netem
	clientID  string // set once by the reading goroutine, under nm.mu
	pending   []byte // bytes read while identifying the client, not yet handed to the broker
	closeOnce sync.Once
	closed    chan struct{}
}

var errCut = errors.New("kafkatest: connection cut")

// identify reads the first request header: size int32, api key int16, version int16,
// correlation id int32, then the client id as an int16-length string.
func (c *conn) identify() error {
	head := make([]byte, 14)
	if _, err := io.ReadFull(c.Conn, head); err != nil {
		return err
	}
	n := int(int16(binary.BigEndian.Uint16(head[12:])))
	id := make([]byte, max(n, 0))
	if _, err := io.ReadFull(c.Conn, id); err != nil {
		return err
	}
	// Netem.set reads clientID from other goroutines, under mu.
	c.nm.mu.Lock()
	c.clientID = string(id)
	c.nm.mu.Unlock()
	c.pending = append(head, id...)
	return nil
}

func (c *conn) Read(p []byte) (int, error) {
	if c.pending == nil && c.clientID == "" {
		if err := c.identify(); err != nil {
			return 0, err
		}
	}
	if err := c.await(); err != nil {
		return 0, err
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	f := c.nm.faultFor(c.clientID)
	switch f.kind {
	case Refuse:
		c.Close()
		return 0, errCut
	case Blackhole:
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// await applies the client's fault before data is handed to the broker.
func (c *conn) await() error {
	for {
		f := c.nm.faultFor(c.clientID)
		switch f.kind {
		case None:
			return nil
		case Refuse:
			c.Close()
			return errCut
		case Delay:
			select {
			case <-time.After(f.delay):
				return nil
			case <-c.closed:
				return net.ErrClosed
			}
		case Blackhole:
			select {
			case <-f.heal:
			case <-c.closed:
				return net.ErrClosed
			}
		}
	}
}

func (c *conn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		err = c.Conn.Close()
		c.nm.mu.Lock()
		delete(c.nm.conns, c)
		c.nm.mu.Unlock()
	})
	return err
}

// StartT is Start for tests: it fails tb if the broker cannot start and closes it when tb ends.
func StartT(tb testing.TB, opts ...kfake.Opt) *Broker {
	tb.Helper()
	b, err := Start(opts...)
	if err != nil {
		tb.Fatalf("starting embedded broker: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}
