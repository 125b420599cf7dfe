// Package kafkatest runs an in-process Kafka-protocol broker (kfake) for goneli's tests, demo and
// benchmarks, with a network layer that can cut, black-hole or slow down one client, recognised by
// the client.id in its requests, or one broker of a multi-broker cluster, recognised by its listen
// address.
//
// With AsKafka (or KAFKATEST_AS_KAFKA=1 in the environment) the broker answers as Apache Kafka
// does where kfake is more lenient: see askafka.go for what that covers and the Kafka source each
// behaviour follows.
package kafkatest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is a kfake cluster, one node unless kfake.NumBrokers or kfake.Ports say otherwise, whose
// connections pass through a Netem.
type Broker struct {
	*kfake.Cluster
	Net *Netem
	// Kafka holds the knobs of a broker started with AsKafka (or under AsKafkaEnv); nil otherwise.
	Kafka *Kafka
	Addr  string // the first node's address
	// Addrs are the nodes' addresses as the cluster started, node i's at index i. Nodes added or
	// removed later (AddNode, RemoveNode) are not reflected here.
	Addrs []string
}

// DefaultGroupMinSessionTimeout is lowered from Kafka's 6 s so that tests can use short leases.
const DefaultGroupMinSessionTimeout = 500 * time.Millisecond

// MinSession sets the cluster's group.min.session.timeout.ms to d, both the one it enforces and the
// one DescribeConfigs reports: kfake.GroupMinSessionTimeout alone changes only the first, and kfake
// then describes Kafka's default, 6000, which goneli's New would take for the broker's minimum and
// raise its session to. Give it after Start's defaults, which set 500 ms so.
func MinSession(d time.Duration) []kfake.Opt {
	return []kfake.Opt{kfake.GroupMinSessionTimeout(d),
		kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": strconv.Itoa(int(d.Milliseconds()))})}
}

// Start runs a one-broker cluster on a free loopback port (or the port given with kfake.Ports).
// Options given here are applied after the defaults, so kfake.NumBrokers or kfake.Ports with
// several ports start several nodes, every one behind the same Netem.
func Start(opts ...kfake.Opt) (*Broker, error) {
	return StartNet(NewNetem(), opts...)
}

// StartNet is Start with the given Netem in front of the cluster. A broker restarted on the Netem
// of the one it replaces keeps its faults: a client cut off from the old broker is cut off from
// the new one, as a real partition of the network would keep it.
func StartNet(nm *Netem, opts ...kfake.Opt) (*Broker, error) {
	asKafka, opts, err := splitAsKafka(opts)
	if err != nil {
		return nil, err
	}
	all := []kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(nm.Listen)}
	var k *Kafka
	if asKafka != nil {
		k = newKafka(*asKafka)
		all = append([]kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(k.listen(nm.Listen))}, asKafka.kfakeOpts()...)
	}
	all = append(append(all, MinSession(DefaultGroupMinSessionTimeout)...), opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, err
	}
	addrs := c.ListenAddrs()
	if k != nil {
		k.started(c, addrs)
	}
	return &Broker{Cluster: c, Net: nm, Kafka: k, Addr: addrs[0], Addrs: addrs}, nil
}

// StartNetOnPort is StartNet on port, for a broker that replaces one just closed there: the old
// listener can take a moment to release the port, and nothing tells when it has, so it tries
// again every 20 ms for up to wait.
func StartNetOnPort(nm *Netem, port int, wait time.Duration, opts ...kfake.Opt) (*Broker, error) {
	opts = append([]kfake.Opt{kfake.Ports(port)}, opts...)
	deadline := time.Now().Add(wait)
	for {
		b, err := StartNet(nm, opts...)
		if err == nil || time.Now().After(deadline) {
			return b, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the broker and drops every connection.
func (b *Broker) Close() {
	b.Cluster.Close()
	b.Net.closeAll()
	if b.Kafka != nil {
		b.Kafka.close()
	}
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

// Netem tracks the brokers' server-side connections by client.id and by the listen address of the
// broker they reach, and applies faults to them. A fault set on a client takes precedence over one
// set on a broker. A TLS connection (kfake.TLS) is known by its broker only: its client.id is
// encrypted.
type Netem struct {
	mu     sync.Mutex
	faults map[string]fault // by client.id, or by its key (SetClientKey)
	nodes  map[string]fault // by broker listen address
	conns  map[*conn]struct{}
	key    func(clientID string) string // nil: a client is known by its client.id
}

type fault struct {
	kind  Fault
	delay time.Duration
	heal  chan struct{} // closed when this fault ends
}

// NewNetem returns a Netem that lets everything through.
func NewNetem() *Netem {
	return &Netem{faults: map[string]fault{}, nodes: map[string]fault{}, conns: map[*conn]struct{}{}}
}

// Listen is a kfake.ListenFn.
func (nm *Netem) Listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: ln, nm: nm}, nil
}

// SetClientKey makes nm know each client by key(client.id) instead of its client.id, so that one
// Cut covers several clients: goneli derives the client.id of an instance's observer and of its
// roles consumer from the one its producer has. It applies to connections accepted from then on;
// set it before any client connects. key may be called concurrently, and must not call nm.
func (nm *Netem) SetClientKey(key func(clientID string) string) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	nm.key = key
}

// Cut applies kind to every connection of clientID, present and future.
func (nm *Netem) Cut(clientID string, kind Fault) {
	nm.set(false, clientID, fault{kind: kind, heal: make(chan struct{})})
}

// Slow delays everything clientID sends by d.
func (nm *Netem) Slow(clientID string, d time.Duration) {
	nm.set(false, clientID, fault{kind: Delay, delay: d, heal: make(chan struct{})})
}

// Heal ends any fault on clientID. Black-holed connections are closed, since the bytes they lost
// have left them unusable; the client reconnects.
func (nm *Netem) Heal(clientID string) {
	nm.set(false, clientID, fault{kind: None})
}

// CutBroker applies kind to every client's connections to the broker listening on addr (one of
// Broker.Addrs), present and future: that broker is cut off from its clients while the others
// still reach them. The cluster itself is not told, as a broker that its clients cannot reach
// still leads its partitions and coordinates its groups.
func (nm *Netem) CutBroker(addr string, kind Fault) {
	nm.set(true, addr, fault{kind: kind, heal: make(chan struct{})})
}

// HealBroker ends any fault on the broker listening on addr, as Heal does for a client.
func (nm *Netem) HealBroker(addr string) {
	nm.set(true, addr, fault{kind: None})
}

// set replaces the fault on a broker's address (node) or on a client.id.
func (nm *Netem) set(node bool, key string, f fault) {
	nm.mu.Lock()
	faults := nm.faults
	if node {
		faults = nm.nodes
	}
	old, had := faults[key]
	if f.kind == None {
		delete(faults, key)
	} else {
		faults[key] = f
	}
	var victims []*conn
	for c := range nm.conns {
		of := c.clientID
		if node {
			of = c.node
		}
		if of == key && (f.kind == Refuse || (had && old.kind == Blackhole)) {
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

func (nm *Netem) faultFor(c *conn) fault {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if f, ok := nm.faults[c.clientID]; ok {
		return f
	}
	return nm.nodes[c.node]
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
	c := &conn{Conn: nc, nm: l.nm, node: l.Addr().String(), closed: make(chan struct{})}
	l.nm.mu.Lock()
	l.nm.conns[c] = struct{}{}
	l.nm.mu.Unlock()
	return c, nil
}

type conn struct {
	net.Conn
	nm        *Netem
	node      string // the listen address of the broker the connection reaches
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
	if head[0] == tlsHandshake {
		// A TLS ClientHello (kfake.TLS wraps this listener), always longer than head: its bytes
		// name no client. Read as a request header, its random bytes gave a client id length
		// that the hello was often too short to fill, and the handshake hung.
		c.pending = head
		return nil
	}
	n := int(int16(binary.BigEndian.Uint16(head[12:])))
	id := make([]byte, max(n, 0))
	if _, err := io.ReadFull(c.Conn, id); err != nil {
		return err
	}
	c.nm.mu.Lock()
	key := c.nm.key
	c.nm.mu.Unlock()
	clientID := string(id)
	if key != nil {
		// Called without mu: key may take locks of its own.
		clientID = key(clientID)
	}
	// Netem.set reads clientID from other goroutines, under mu.
	c.nm.mu.Lock()
	c.clientID = clientID
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
	f := c.nm.faultFor(c)
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
		f := c.nm.faultFor(c)
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
