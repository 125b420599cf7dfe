// Package realkafka runs Apache Kafka itself for goneli's tests: a KRaft cluster of one or more
// combined broker and controller nodes, each a JVM started from the test binary, on free loopback
// ports, with data in a directory of its own that is removed when the cluster closes.
//
// The broker's jars come from Maven Central: pom.xml names org.apache.kafka:kafka_2.13 at a pinned
// version, and the first run fetches it and its runtime jars with `mvn dependency:copy-dependencies`
// into the user's cache directory (~/.cache/goneli/kafka/<version>-<pom digest>/lib), which later runs
// use as they find it, without mvn. GONELI_KAFKA_VERSION runs another version (3.9.x and 4.x are
// served); GONELI_KAFKA_CACHE moves the cache.
//
// The environment decides what a test does where Kafka cannot run:
//
//   - GONELI_REAL_KAFKA unset: a machine without java (or, before the first fetch, mvn) skips the
//     tests with one line saying what to install.
//   - GONELI_REAL_KAFKA=require (CI): it fails them with that line instead.
//   - GONELI_REAL_KAFKA=off: the tests skip.
//   - KAFKA_BOOTSTRAP=host:port[,host:port]: the tests use that cluster and start none; a test that
//     controls nodes (kill, pause, restart) skips, since a cluster it did not start has none it may
//     control. Its group timing is what that cluster was given.
//
// Options.Listeners adds client listeners of a test's own beside the harness's PLAINTEXT one: a
// SASL_PLAINTEXT or SASL_SSL listener for principals an authorizer tells apart (Options.SCRAM
// formats SCRAM users into the cluster; the TLS listeners present a certificate of the cluster's
// own authority, Cluster.CAFile), or a listener per client advertised at a Proxy's address,
// through which a test cuts that client off from the cluster.
//
// A program that is not a test (the benchmark's --kafka real) starts a cluster with Open, which
// returns an error where Start would skip or fail a test.
//
// See docs/testing.md for what is fetched, how big it is and how long it takes.
package realkafka

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/testkit"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Profile is a set of broker settings for a cluster's groups.
type Profile int

const (
	// Fast is for tests with short leases: no initial rebalance delay, classic sessions down to
	// 500 ms, and KIP-848 sessions of 2 s with 100 ms heartbeats (group.consumer.*, minimums lowered
	// so that a group may set its own down to 500 ms and 50 ms).
	Fast Profile = iota
	// Stock keeps Apache Kafka's group timing: a 6 s least classic session, a 3 s initial rebalance
	// delay, KIP-848 sessions of 45 s (least 45 s) with 5 s heartbeats (least 5 s).
	Stock
)

func (p Profile) String() string {
	if p == Stock {
		return "stock"
	}
	return "fast"
}

// groupSettings are each profile's broker settings for groups.
var groupSettings = map[Profile]map[string]string{
	Fast: {
		"group.initial.rebalance.delay.ms":         "0",
		"group.min.session.timeout.ms":             "500",
		"group.consumer.session.timeout.ms":        "2000",
		"group.consumer.min.session.timeout.ms":    "500",
		"group.consumer.heartbeat.interval.ms":     "100",
		"group.consumer.min.heartbeat.interval.ms": "50",
	},
	Stock: {},
}

// Options say what cluster to start.
type Options struct {
	// Nodes is the number of combined broker and controller nodes: 1 (the default) or more; all of
	// them vote in the KRaft quorum.
	Nodes int
	// Profile sets the group timing: Fast (the default) or Stock.
	Profile Profile
	// Version is the Kafka version: GONELI_KAFKA_VERSION, else DefaultVersion.
	Version string
	// Configs are more broker settings, given to every node after the harness's own.
	Configs map[string]string
	// Cold leaves the group coordinators as a new cluster has them: Start otherwise waits until a
	// group's coordinator answers, which creates __consumer_offsets.
	Cold bool
	// Listeners are listeners for clients beside the harness's own PLAINTEXT one (which the
	// harness, the nodes among themselves and most tests use): each node binds every one on a free
	// loopback port of its own (Node.ListenerAddr, Cluster.Listener).
	Listeners []Listener
	// SCRAM are SCRAM users that the cluster has from its start: formatting writes their
	// credentials into the metadata log (kafka-storage format --add-scram, Kafka 3.5 or later), so
	// no client waits for them to reach the brokers. A listener that serves them needs its
	// mechanisms in Options.Configs (listener.name.<name>.sasl.enabled.mechanisms and
	// listener.name.<name>.<mechanism>.sasl.jaas.config; see SCRAMListenerConfigs).
	SCRAM []SCRAMUser
}

// SCRAMUser is a SCRAM credential: the user Name may authenticate with Password by Mechanism,
// SCRAM-SHA-256 or SCRAM-SHA-512.
type SCRAMUser struct {
	Mechanism, Name, Password string
}

// checkSCRAM refuses users that kafka-storage format would refuse or misread: it splits a
// credential's fields at commas (ScramParser, metadata/src/main/java/org/apache/kafka/metadata/storage).
func checkSCRAM(o Options) error {
	for i, u := range o.SCRAM {
		if u.Mechanism != "SCRAM-SHA-256" && u.Mechanism != "SCRAM-SHA-512" {
			return fmt.Errorf("Options.SCRAM[%d].Mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", i, u.Mechanism)
		}
		if u.Name == "" || strings.ContainsAny(u.Name, ",\"") {
			return fmt.Errorf("Options.SCRAM[%d].Name %q: want a name without commas or quotes", i, u.Name)
		}
		if u.Password == "" || strings.ContainsAny(u.Password, ",\"") {
			return fmt.Errorf("Options.SCRAM[%d].Password: want a password without commas or quotes", i)
		}
	}
	return nil
}

// SCRAMListenerConfigs are the broker settings that make listener serve SASL with the SCRAM
// mechanism (SCRAM-SHA-256 or SCRAM-SHA-512) to the users of Options.SCRAM. A broker needs a JAAS
// entry for each mechanism a listener enables, even one whose credentials live in the metadata
// log (JaasContext.loadServerContext).
func SCRAMListenerConfigs(listener, mechanism string) map[string]string {
	prefix := "listener.name." + strings.ToLower(listener) + "."
	return map[string]string{
		prefix + "sasl.enabled.mechanisms":                        mechanism,
		prefix + strings.ToLower(mechanism) + ".sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
	}
}

// Listener is a listener for clients on every node. A client that bootstraps through a listener
// is told, in the metadata it gets, the addresses that every node advertises for that listener,
// and connects to those from then on: a listener per client, advertised at a proxy's address,
// routes all of that client's connections through the proxy (see Proxy).
type Listener struct {
	// Name is the listener's name: upper-case letters, digits and underscores, other than PLAINTEXT
	// and CONTROLLER (the harness's own).
	Name string
	// Protocol is its security protocol: PLAINTEXT (the default), SSL, SASL_PLAINTEXT or
	// SASL_SSL. The SASL mechanisms and users are broker settings of Options.Configs
	// (listener.name.<name>.*) and Options.SCRAM; a TLS listener presents a certificate for
	// 127.0.0.1 and localhost that the cluster's own authority signed (Cluster.CAFile).
	Protocol string
	// Advertise, if set, holds the address that each node advertises for the listener, node i's at
	// index i; an empty one, or none, is the address the node binds.
	Advertise []string
}

func (l Listener) protocol() string {
	if l.Protocol == "" {
		return "PLAINTEXT"
	}
	return l.Protocol
}

func (l Listener) tls() bool { return strings.HasSuffix(l.protocol(), "SSL") }

// checkListeners refuses listeners that Kafka would refuse, or that the cluster cannot advertise.
func checkListeners(o Options) error {
	seen := map[string]bool{"PLAINTEXT": true, "CONTROLLER": true}
	for i, l := range o.Listeners {
		if l.Name == "" || strings.Trim(l.Name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			return fmt.Errorf("Options.Listeners[%d].Name %q: want upper-case letters, digits and underscores", i, l.Name)
		}
		if seen[l.Name] {
			return fmt.Errorf("Options.Listeners[%d].Name %q: taken (PLAINTEXT and CONTROLLER are the harness's)", i, l.Name)
		}
		seen[l.Name] = true
		if p := l.protocol(); p != "PLAINTEXT" && p != "SASL_PLAINTEXT" && p != "SSL" && p != "SASL_SSL" {
			return fmt.Errorf("Options.Listeners[%d].Protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", i, l.Protocol)
		}
		if len(l.Advertise) > o.Nodes {
			return fmt.Errorf("Options.Listeners[%d].Advertise: %d addresses for %d nodes", i, len(l.Advertise), o.Nodes)
		}
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Version == "" {
		o.Version = os.Getenv("GONELI_KAFKA_VERSION")
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	return o
}

// key identifies the options of a shared cluster.
func (o Options) key() string {
	o = o.withDefaults()
	keys := slices.Sorted(maps.Keys(o.Configs))
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d/%s/%s/%v", o.Nodes, o.Profile, o.Version, o.Cold)
	for _, k := range keys {
		fmt.Fprintf(&sb, "/%s=%s", k, o.Configs[k])
	}
	for _, l := range o.Listeners {
		fmt.Fprintf(&sb, "/listener %s %s %s", l.Name, l.protocol(), strings.Join(l.Advertise, ","))
	}
	for _, u := range o.SCRAM {
		fmt.Fprintf(&sb, "/scram %s %s %s", u.Mechanism, u.Name, u.Password)
	}
	return sb.String()
}

// StartTimeout bounds the start of a cluster and of a restarted node.
const StartTimeout = 3 * time.Minute

// Cluster is a running Kafka cluster, or an existing one named by KAFKA_BOOTSTRAP.
type Cluster struct {
	opts      Options
	bootstrap string // KAFKA_BOOTSTRAP, or the nodes' addresses
	external  bool
	dir       string
	clusterID string
	install   *install
	java      javaInfo
	sp        *spawner
	nodes     []*Node
	// caFile and keyStore are the TLS listeners' authority and key store (PEM); empty without one.
	caFile, keyStore string
	// Took is how long Start took, fetching aside, of which Formatting formatted the storage,
	// Serving started the nodes until each served, Warming awaited a group coordinator; Fetched is
	// how long mvn took (0: the jars were in the cache).
	Took, Formatting, Serving, Warming, Fetched time.Duration

	closeOnce sync.Once
	closeErr  error
}

// Start starts a cluster for one test and closes it when the test ends. It skips or fails tb where
// Kafka cannot run (see the package doc) and fails it if the cluster does not start.
func Start(tb testing.TB, o Options) *Cluster {
	tb.Helper()
	c, err := start(o)
	if err != nil {
		unavailable(tb, err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			c.logTails(tb)
		}
		if err := c.Close(); err != nil {
			tb.Errorf("closing the Kafka cluster: %v", err)
		}
	})
	return c
}

// Open starts a cluster for a program that is not a test (the benchmark, go run ./bench --kafka
// real): where Start would skip or fail a test it returns the error, whose text says what to
// install, and the caller closes the cluster. It always starts a cluster of its own: KAFKA_BOOTSTRAP
// and GONELI_REAL_KAFKA are switches of the tests, and a program that wants an existing cluster
// dials it itself. The JVMs die with the program, as with a test binary (process.go).
func Open(o Options) (*Cluster, error) {
	return startLocal(o.withDefaults())
}

var shared struct {
	sync.Mutex
	mainUsed bool
	byKey    map[string]*sharedCluster
}

type sharedCluster struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Shared returns a cluster that every test of the package with the same options shares, started
// by the first of them: a node takes seconds to start. realkafka.Main, in the package's TestMain,
// closes it once the tests have run. A test that changes the cluster (stops a node, changes
// settings) starts one of its own with Start.
func Shared(tb testing.TB, o Options) *Cluster {
	tb.Helper()
	shared.Lock()
	if !shared.mainUsed {
		shared.Unlock()
		tb.Fatal(errNoMain)
	}
	if shared.byKey == nil {
		shared.byKey = map[string]*sharedCluster{}
	}
	s := shared.byKey[o.key()]
	if s == nil {
		s = &sharedCluster{}
		shared.byKey[o.key()] = s
	}
	shared.Unlock()
	s.once.Do(func() { s.c, s.err = start(o) })
	if s.err != nil {
		unavailable(tb, s.err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			s.c.logTails(tb)
		}
	})
	return s.c
}

// Main runs the package's tests and then closes the clusters they shared; use it in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(realkafka.Main(m)) }
//
// (with a leak check after it, if the package has one).
func Main(m *testing.M) int {
	shared.Lock()
	shared.mainUsed = true
	shared.Unlock()
	code := m.Run()
	if err := CloseShared(); err != nil {
		fmt.Fprintf(os.Stderr, "realkafka: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// CloseShared closes every cluster that Shared started.
func CloseShared() error {
	shared.Lock()
	all := shared.byKey
	shared.byKey = nil
	shared.Unlock()
	var errs []error
	for _, s := range all {
		if s.c != nil {
			errs = append(errs, s.c.Close())
		}
	}
	return errors.Join(errs...)
}

// unavailable skips or fails tb for err, as the package doc says.
func unavailable(tb testing.TB, err error) {
	tb.Helper()
	var m *missing
	if errors.As(err, &m) {
		switch mode() {
		case "require":
			tb.Fatalf("GONELI_REAL_KAFKA=require: %v", err)
		default:
			tb.Skip(err)
		}
	}
	var off *switchedOff
	if errors.As(err, &off) {
		tb.Skip(err)
	}
	tb.Fatalf("starting real Kafka: %v", err)
}

var errNoMain = errors.New("realkafka: Shared needs realkafka.Main in the package's TestMain, which closes the shared clusters")

type switchedOff struct{}

func (*switchedOff) Error() string {
	return "GONELI_REAL_KAFKA=off: the tests on real Kafka are switched off"
}

// mode is GONELI_REAL_KAFKA, lower case.
func mode() string { return strings.ToLower(strings.TrimSpace(os.Getenv("GONELI_REAL_KAFKA"))) }

func start(o Options) (*Cluster, error) {
	o = o.withDefaults()
	switch m := mode(); m {
	case "", "require":
	case "off":
		return nil, &switchedOff{}
	default:
		return nil, fmt.Errorf("GONELI_REAL_KAFKA=%q: want require, off or nothing", m)
	}
	if bs := strings.TrimSpace(os.Getenv("KAFKA_BOOTSTRAP")); bs != "" {
		return external(bs, o)
	}
	return startLocal(o)
}

// startLocal starts a cluster of o's nodes on this machine.
func startLocal(o Options) (*Cluster, error) {
	if o.Nodes < 1 {
		return nil, fmt.Errorf("Options.Nodes %d: want 1 or more", o.Nodes)
	}
	if err := checkListeners(o); err != nil {
		return nil, err
	}
	if err := checkSCRAM(o); err != nil {
		return nil, err
	}
	j, err := checkJava(o.Version)
	if err != nil {
		return nil, err
	}
	in, err := provision(o.Version)
	if err != nil {
		return nil, err
	}
	reapStale()
	var last error
	// Free ports are picked by binding and releasing them; another process can take one in
	// between, and the node then fails to bind it. Such a start is tried again on other ports.
	for attempt := 0; attempt < 3; attempt++ {
		c, err := launch(o, j, in)
		if err == nil {
			c.Fetched = in.fetched
			in.fetched = 0 // the next cluster of this process fetched nothing
			return c, nil
		}
		last = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, last
}

var errPortTaken = errors.New("a port was taken")

// external is the cluster at bootstrap.
func external(bootstrap string, o Options) (*Cluster, error) {
	first := strings.Split(bootstrap, ",")[0]
	conn, err := net.DialTimeout("tcp", first, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("KAFKA_BOOTSTRAP=%s: cannot connect to %s (%v): start that cluster or unset KAFKA_BOOTSTRAP", bootstrap, first, err)
	}
	_ = conn.Close()
	return &Cluster{opts: o, bootstrap: bootstrap, external: true}, nil
}

// launch makes the cluster's directory, formats each node's storage and starts the nodes.
func launch(o Options, j javaInfo, in *install) (c *Cluster, err error) {
	began := time.Now()
	if err := os.MkdirAll(dataBase, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(dataBase, "cluster-")
	if err != nil {
		return nil, err
	}
	if err := writeStamp(filepath.Join(dir, ownerFile), os.Getpid()); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c = &Cluster{opts: o, dir: dir, clusterID: newClusterID(), install: in, java: j, sp: newSpawner()}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, c.tails(30))
			_ = c.Close()
		}
	}()
	per := 2 + len(o.Listeners) // ports per node: the broker's, the controller's, the listeners'
	if slices.ContainsFunc(o.Listeners, Listener.tls) {
		if err := c.makePKI(); err != nil {
			return c, err
		}
	}
	ports, err := freePorts(per * o.Nodes)
	if err != nil {
		return c, err
	}
	for i := 0; i < o.Nodes; i++ {
		mine := ports[per*i : per*(i+1)]
		n := &Node{ID: int32(i), c: c, dir: filepath.Join(dir, fmt.Sprintf("node-%d", i)),
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(mine[0])), controller: mine[1], listeners: map[string]string{}}
		for j, l := range o.Listeners {
			n.listeners[l.Name] = net.JoinHostPort("127.0.0.1", strconv.Itoa(mine[2+j]))
		}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
	}
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		if err := os.WriteFile(n.propsPath(), []byte(c.properties(n)), 0o644); err != nil {
			return c, err
		}
		addrs[i] = n.Addr
	}
	c.bootstrap = strings.Join(addrs, ",")
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := c.format(ctx); err != nil {
		return c, err
	}
	c.Formatting = time.Since(began)
	for _, n := range c.nodes {
		if err := n.launch(); err != nil {
			return c, err
		}
	}
	for _, n := range c.nodes {
		if err := n.awaitReady(ctx); err != nil {
			return c, err
		}
	}
	c.Serving = time.Since(began) - c.Formatting
	if !o.Cold {
		if err := c.warm(ctx); err != nil {
			return c, err
		}
	}
	c.Took = time.Since(began)
	c.Warming = c.Took - c.Serving - c.Formatting
	return c, nil
}

// newClusterID is a random Kafka Uuid in its string form, as kafka-storage random-uuid prints one:
// 16 bytes, URL-safe base64 without padding, never beginning with '-'.
func newClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if s := base64.RawURLEncoding.EncodeToString(b[:]); s[0] != '-' {
			return s
		}
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// properties is node n's server.properties.
func (c *Cluster) properties(n *Node) string {
	voters := make([]string, len(c.nodes))
	for i, m := range c.nodes {
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", m.ID, m.controller)
	}
	rf := strconv.Itoa(len(c.nodes))
	listeners := []string{"PLAINTEXT://" + n.Addr, fmt.Sprintf("CONTROLLER://127.0.0.1:%d", n.controller)}
	advertised := []string{"PLAINTEXT://" + n.Addr}
	protocols := []string{"PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"}
	var tlsSettings [][2]string
	for _, l := range c.opts.Listeners {
		if l.tls() {
			prefix := "listener.name." + strings.ToLower(l.Name) + "."
			tlsSettings = append(tlsSettings, [2]string{prefix + "ssl.keystore.type", "PEM"},
				[2]string{prefix + "ssl.keystore.location", c.keyStore})
		}
		bound := n.listeners[l.Name]
		listeners = append(listeners, l.Name+"://"+bound)
		adv := bound
		if int(n.ID) < len(l.Advertise) && l.Advertise[n.ID] != "" {
			adv = l.Advertise[n.ID]
		}
		advertised = append(advertised, l.Name+"://"+adv)
		protocols = append(protocols, l.Name+":"+l.protocol())
	}
	settings := [][2]string{
		{"process.roles", "broker,controller"},
		{"node.id", strconv.Itoa(int(n.ID))},
		// A static quorum (KRaft version 0): formatting needs no --standalone or
		// --initial-controllers then, on 3.9 and 4.x alike (StorageTool.runFormatCommand asks for
		// one of them only when controller.quorum.voters is empty), and a node restarted with the
		// same file rejoins as it was.
		{"controller.quorum.voters", strings.Join(voters, ",")},
		{"listeners", strings.Join(listeners, ",")},
		{"advertised.listeners", strings.Join(advertised, ",")},
		{"controller.listener.names", "CONTROLLER"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"listener.security.protocol.map", strings.Join(protocols, ",")},
		{"log.dirs", filepath.Join(n.dir, "data")},
		{"num.partitions", "1"},
		// Replication fitting the cluster: Kafka's defaults want three replicas of the internal
		// topics, which one node cannot hold.
		{"default.replication.factor", rf},
		{"offsets.topic.replication.factor", rf},
		{"transaction.state.log.replication.factor", rf},
		{"transaction.state.log.min.isr", strconv.Itoa(min(len(c.nodes), 2))},
		// Fewer partitions of the internal topics than Kafka's 50: they are created, and led, in
		// seconds less on two cores. Nothing in a test depends on their number.
		{"offsets.topic.num.partitions", "10"},
		{"transaction.state.log.num.partitions", "10"},
		// The log cleaner's dedupe buffer is 128 MiB by default, a quarter of the small heap.
		{"log.cleaner.dedupe.buffer.size", strconv.Itoa(16 << 20)},
	}
	settings = append(settings, tlsSettings...)
	for _, k := range slices.Sorted(maps.Keys(groupSettings[c.opts.Profile])) {
		settings = append(settings, [2]string{k, groupSettings[c.opts.Profile][k]})
	}
	for _, k := range slices.Sorted(maps.Keys(c.opts.Configs)) {
		settings = append(settings, [2]string{k, c.opts.Configs[k]})
	}
	// GONELI_KAFKA_CONFIGS="key=value key=value" adds settings to every node of every cluster, last:
	// for trying a setting without changing a test.
	for _, kv := range strings.Fields(os.Getenv("GONELI_KAFKA_CONFIGS")) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			settings = append(settings, [2]string{k, v})
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# node %d of a realkafka cluster (%s profile), Kafka %s\n", n.ID, c.opts.Profile, c.opts.Version)
	for _, s := range settings {
		fmt.Fprintf(&sb, "%s=%s\n", s[0], s[1])
	}
	return sb.String()
}

// jvmArgs are the JVM's options: a small heap (the machine is shared, and a test broker holds
// little), the serial collector (two cores), C1 only (-XX:TieredStopAtLevel=1: a node starts in
// about two thirds of the time, and a test cluster never runs long enough for C2 to pay off; see
// docs/testing.md). GONELI_KAFKA_JVM_OPTS adds options after these.
func (c *Cluster) jvmArgs() []string {
	level := os.Getenv("GONELI_KAFKA_LOG")
	if level == "" {
		level = "warn"
	}
	args := []string{
		"-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=" + level,
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
	}
	return append(args, strings.Fields(os.Getenv("GONELI_KAFKA_JVM_OPTS"))...)
}

// format formats every node's storage with the cluster's id, the nodes at once.
func (c *Cluster) format(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.format(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// warm waits until a group's coordinator answers, which has the cluster create __consumer_offsets
// and load its partitions: the first test then meets a cluster as it is after its first minute,
// not as it is in its first seconds (COORDINATOR_NOT_AVAILABLE for a while). Options.Cold skips it.
func (c *Cluster) warm(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.bootstrap, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	return poll(ctx, "a group coordinator to answer", func() error {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "realkafka-warm"
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if len(resp.Coordinators) > 0 {
			return kerrOf(resp.Coordinators[0].ErrorCode)
		}
		return kerrOf(resp.ErrorCode)
	})
}

// poll calls f every 100 ms until it returns nil or ctx ends; a JVM gives no event to await.
func poll(ctx context.Context, what string, f func() error) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		var stop *stopPolling
		if errors.As(err, &stop) {
			return stop.err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s: %v (last: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Timing says how long the cluster took to start, for a test's log.
func (c *Cluster) Timing() string {
	if c.external {
		return "external"
	}
	return fmt.Sprintf("started in %v (format %v, serve %v, group coordinator %v; mvn %v)", c.Took.Round(time.Millisecond),
		c.Formatting.Round(time.Millisecond), c.Serving.Round(time.Millisecond), c.Warming.Round(time.Millisecond), c.Fetched.Round(time.Millisecond))
}

// Bootstrap is the cluster's bootstrap.servers: every node's address, comma-separated.
func (c *Cluster) Bootstrap() string { return c.bootstrap }

// External reports whether the cluster is one KAFKA_BOOTSTRAP named, which the tests did not start.
func (c *Cluster) External() bool { return c.external }

// Version is the Kafka version the cluster runs; "" for an external one.
func (c *Cluster) Version() string {
	if c.external {
		return ""
	}
	return c.opts.Version
}

// KIP848 reports whether the cluster serves the consumer group protocol to librdkafka 2.11.1, which
// speaks it only to brokers offering ConsumerGroupHeartbeat v1 (Kafka 4.0 and later): for a
// cluster the tests started, by its version; for an external one, by asking it.
func (c *Cluster) KIP848(ctx context.Context) (bool, error) {
	if !c.external {
		return major(c.opts.Version) >= 4, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.bootstrap, ",")...))
	if err != nil {
		return false, err
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		return false, err
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == kmsg.ConsumerGroupHeartbeat.Int16() {
			return k.MaxVersion >= 1, nil
		}
	}
	return false, nil
}

// Listener is the bootstrap of one of Options.Listeners: every node's address for it as bound,
// comma-separated. For an external cluster it skips tb, as Nodes does: the listeners are the
// harness's.
func (c *Cluster) Listener(tb testing.TB, name string) string {
	tb.Helper()
	var addrs []string
	for _, n := range c.Nodes(tb) {
		addrs = append(addrs, n.ListenerAddr(tb, name))
	}
	return strings.Join(addrs, ",")
}

// ListenerAddrs is Listener for a program that is not a test: every node's address for the
// listener called name, comma-separated, or an error for an external cluster or a name the cluster
// was not given.
func (c *Cluster) ListenerAddrs(name string) (string, error) {
	if c.external {
		return "", fmt.Errorf("KAFKA_BOOTSTRAP=%s: an external cluster has none of the harness's listeners", c.bootstrap)
	}
	var addrs []string
	for _, n := range c.nodes {
		addr, ok := n.listeners[name]
		if !ok {
			return "", fmt.Errorf("node %d has no listener %q", n.ID, name)
		}
		addrs = append(addrs, addr)
	}
	return strings.Join(addrs, ","), nil
}

// Pids are the pids of the nodes' JVMs that run, for a program that samples what the broker costs
// (/proc/<pid>/stat); none for an external cluster.
func (c *Cluster) Pids() []int {
	var pids []int
	for _, n := range c.nodes {
		if pid := n.Pid(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// CAFile is the file, in PEM, of the authority that signed the certificate of the cluster's TLS
// listeners (Options.Listeners of protocol SSL or SASL_SSL), as ssl.ca.location takes it. It fails
// tb for a cluster without one, and skips it for an external cluster, as Listener does.
func (c *Cluster) CAFile(tb testing.TB) string {
	tb.Helper()
	c.Nodes(tb)
	if c.caFile == "" {
		tb.Fatal("the cluster has no TLS listener (Options.Listeners of protocol SSL or SASL_SSL)")
	}
	return c.caFile
}

// makePKI makes the TLS listeners' authority and certificate, in the cluster's directory: one
// certificate for every node, naming the loopback address they all bind.
func (c *Cluster) makePKI() error {
	dir := filepath.Join(c.dir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p, err := testkit.MakePKI(dir, testkit.PKIOpts{}, "127.0.0.1", "127.0.0.1", "localhost")
	if err != nil {
		return fmt.Errorf("making the TLS listeners' certificate: %w", err)
	}
	store, err := p.ServerPEM()
	if err != nil {
		return err
	}
	c.keyStore = filepath.Join(dir, "server.pem")
	if err := os.WriteFile(c.keyStore, store, 0o600); err != nil {
		return err
	}
	c.caFile = p.CAFile
	return nil
}

// Profile is the cluster's group timing profile (for an external cluster, the one asked for,
// which that cluster need not have).
func (c *Cluster) Profile() Profile { return c.opts.Profile }

// Dir is the cluster's directory: each node's properties, data and log (kafka.log) are in node-<id>.
func (c *Cluster) Dir() string { return c.dir }

// Nodes returns the cluster's nodes, node i at index i. For an external cluster it skips tb: the
// tests may not control nodes they did not start.
func (c *Cluster) Nodes(tb testing.TB) []*Node {
	tb.Helper()
	if c.external {
		tb.Skipf("KAFKA_BOOTSTRAP=%s: this test stops, kills or pauses broker nodes, which it can do only to a cluster it starts; skipping", c.bootstrap)
	}
	return c.nodes
}

// Node returns node i (see Nodes).
func (c *Cluster) Node(tb testing.TB, i int) *Node {
	tb.Helper()
	nodes := c.Nodes(tb)
	if i < 0 || i >= len(nodes) {
		tb.Fatalf("node %d: the cluster has nodes 0 to %d", i, len(nodes)-1)
	}
	return nodes[i]
}

// Close kills every node and removes the cluster's directory (GONELI_KAFKA_KEEP=1 keeps it, to
// read the logs). An external cluster is left as it is. Close is idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		if c.external {
			return
		}
		for _, n := range c.nodes {
			n.close()
		}
		if c.sp != nil {
			c.sp.close()
		}
		if os.Getenv("GONELI_KAFKA_KEEP") != "" {
			fmt.Fprintf(os.Stderr, "realkafka: GONELI_KAFKA_KEEP: the cluster's files are in %s\n", c.dir)
			return
		}
		c.closeErr = os.RemoveAll(c.dir)
	})
	return c.closeErr
}

// tails renders the last n lines of every node's log, for an error.
func (c *Cluster) tails(n int) string {
	var sb strings.Builder
	for _, node := range c.nodes {
		b, err := os.ReadFile(node.logPath())
		if err != nil || len(b) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\n--- node %d: %s (last lines) ---\n%s", node.ID, node.logPath(), lastLines(b, n))
	}
	return sb.String()
}

func (c *Cluster) logTails(tb testing.TB) {
	if c == nil || c.external {
		return
	}
	if t := c.tails(20); t != "" {
		tb.Logf("the Kafka nodes' logs:%s", t)
	}
}

// javaCmd is a command running the JVM with the cluster's options on class main.
func (c *Cluster) javaCmd(dir, main string, args ...string) *exec.Cmd {
	all := append(c.jvmArgs(), "-cp", c.install.classpath(), main)
	cmd := exec.Command(c.java.path, append(all, args...)...)
	cmd.Dir = dir
	return cmd
}
