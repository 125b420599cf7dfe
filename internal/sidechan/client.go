package sidechan

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Channel is what an instance asks of goneli's own connection: the group check's description of
// the group, the batched heartbeats, and whether it has given way to librdkafka. *Client is one.
type Channel interface {
	// DescribeConsumerGroups describes the one group asked for, in librdkafka's form, within ctx
	// (options are ignored). A group-level error is in the description's Error, as librdkafka has
	// it.
	DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error)
	// Produce appends records to topic: one ProduceRequest per leader broker, all at once.
	Produce(ctx context.Context, topic string, records []Record) []Produced
	// EndOffsets reads where each of topic's partitions ends, in one request per leader broker.
	EndOffsets(ctx context.Context, topic string, partitions []int32) (map[int32]int64, error)
	// Fallback is nil until the connection has given way to librdkafka for good, and then why
	// (a *FallbackError).
	Fallback() error
	// Close closes the connections; it is idempotent.
	Close()
}

// Options are what the instance, Describe or the doctor add to the client settings.
type Options struct {
	// ConsumerProtocol says that the group speaks KIP-848: it is described with
	// ConsumerGroupDescribe first.
	ConsumerProtocol bool
	// Limit bounds each request: a connection that does not answer within it is closed rather
	// than used again (kgo's RequestTimeoutOverhead), and retries stop after it.
	Limit time.Duration
	// OnFallback is called once, when the connection gives way to librdkafka for good (a failed
	// TLS handshake, or GiveWay); it must not block.
	OnFallback func(error)
	// Operations caps Metadata at version 10, the last that reports the principal's operations
	// on the cluster, and DescribeGroups at version 5, the last that answers a group that does not
	// exist (or is of the consumer protocol) as Dead without an error, and so with the principal's
	// operations on it (the doctor reads them): from version 6 (KIP-1043) Kafka answers such a
	// group GROUP_ID_NOT_FOUND, and fills in operations only for results without an error
	// (KafkaApis.handleDescribeGroupsRequest).
	Operations bool
}

// Client is goneli's own connection to a cluster: one kgo client (franz-go), which finds
// coordinators, retries their errors, re-authenticates (KIP-368), honours throttling (KIP-219),
// closes idle connections and talks to several brokers at once.
type Client struct {
	cl       *kgo.Client
	settings Settings
	opts     Options
	fallback atomic.Pointer[FallbackError]
	// opened and closed count connections, for tests and measurements.
	opened, closed atomic.Int64
	closing        sync.Once
	// abandoned counts the requests still running that bounded stopped waiting for.
	abandoned sync.WaitGroup

	mu      sync.Mutex
	leaders map[string]topicLeaders // by topic: where Produce sends each partition
	// coordinators are the brokers that coordinate each group, by group, as last found: the next
	// description of the group (requestGroup) and a GROUP config resource of it (DescribeConfigs)
	// go there.
	coordinators map[string]int32
}

// New makes a client from a librdkafka configuration, or returns an error wrapping ErrUnsupported
// that names the setting it cannot follow. It connects on the first request.
func New(conf kafka.ConfigMap, o Options) (*Client, error) {
	s, err := Translate(conf)
	if err != nil {
		return nil, err
	}
	c := &Client{settings: s, opts: o, leaders: map[string]topicLeaders{}, coordinators: map[string]int32{}}
	cl, err := kgo.NewClient(c.kgoOptions()...)
	if err != nil {
		return nil, fmt.Errorf("goneli's own connection: %w", err)
	}
	c.cl = cl
	return c, nil
}

// kgoOptions are the kgo settings of Settings and Options.
func (c *Client) kgoOptions() []kgo.Opt {
	s, limit := c.settings, c.opts.Limit
	if limit <= 0 {
		limit = 10 * time.Second
	}
	request := limit
	if s.RequestTimeout > 0 {
		request = min(request, s.RequestTimeout)
	}
	dial := limit
	if s.DialTimeout > 0 {
		dial = min(dial, s.DialTimeout)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.Seeds...),
		kgo.Dialer(c.dialer(dial)),
		kgo.RequestTimeoutOverhead(request),
		kgo.RetryTimeout(limit),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return min(s.Backoff<<min(max(tries-1, 0), 16), s.BackoffMax)
		}),
		// A port of another service that answers with garbage must not make the client allocate
		// gigabytes; a description of a group of a few thousand members fits many times over.
		kgo.BrokerMaxReadBytes(64 << 20),
		kgo.DisableClientMetrics(),
		kgo.WithHooks(connCounter{&c.opened, &c.closed}),
	}
	if s.ClientID != "" {
		opts = append(opts, kgo.ClientID(s.ClientID))
	}
	if s.IdleTimeout > 0 {
		opts = append(opts, kgo.ConnIdleTimeout(s.IdleTimeout))
	}
	if s.sasl != nil {
		opts = append(opts, kgo.SASL(s.sasl))
	}
	// Heartbeats name their topic as librdkafka's producer does: Produce from version 13 names it
	// by ID alone (KIP-516), which a heartbeat has no use for.
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Produce.Int16(), 12)
	if c.opts.Operations {
		v.SetMaxKeyVersion(kmsg.Metadata.Int16(), 10)
		v.SetMaxKeyVersion(kmsg.DescribeGroups.Int16(), 5)
	}
	return append(opts, kgo.MaxVersions(v))
}

// dialer connects, over TLS where configured, and makes the connection give way to librdkafka for
// good when a TLS handshake fails for what the broker sent or refused rather than for the network
// (handshakeRefused).
func (c *Client) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{}
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		if err := c.Fallback(); err != nil {
			return nil, err
		}
		// As tls.Dialer does, the timeout covers the handshake too.
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		raw, err := nd.DialContext(ctx, c.settings.Network, addr)
		if err != nil || c.settings.TLS == nil {
			return raw, err
		}
		cfg := c.settings.TLS
		if cfg.ServerName == "" {
			// tls.Dialer names the server after addr's host where the configuration names none.
			host, _, _ := net.SplitHostPort(addr)
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			if handshakeRefused(err) {
				return nil, c.giveWay(addr, err)
			}
			return nil, err
		}
		return conn, nil
	}
}

// handshakeRefused reports whether a TLS handshake failed for what one end made of the other's
// messages (an alert either end sent, a certificate that Go cannot parse or does not trust, a
// record that is not TLS) rather than for the connection (closed, reset, timed out), which a
// broker that restarts causes too and which the next connection may not meet.
//
// Go's crypto/tls and OpenSSL do not accept the same handshakes. Go 1.22 and later offer no
// TLS_RSA_* (RSA key exchange) cipher suites, which OpenSSL 3 still offers, so a broker that
// accepts only those answers Go's hello with a handshake_failure alert; crypto/x509 refuses to
// parse certificates that OpenSSL accepts (a negative serial number since Go 1.23, malformed or
// duplicate extensions, RSA keys over 8192 bits), and reports that as a plain error, before any
// verification. Whatever such a failure is, it is a property of the broker's TLS setup and of
// Go's, which no retry changes; librdkafka, which connects with OpenSSL, may well succeed, and if
// it fails as well nothing is lost by leaving the work to it.
func handshakeRefused(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && (oe.Op == "remote error" || oe.Op == "local error") {
		// crypto/tls reports an alert, received or sent, as a *net.OpError with these operations
		// (conn.go), which is no failure of the network.
		return true
	}
	var ne net.Error
	return !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &ne)
}

// FallbackError says why goneli's own connection gave way to librdkafka for good.
type FallbackError struct {
	// Broker is the address of the broker whose TLS handshake failed; empty when the connection
	// gave way for another reason (GiveWay), which Err then gives.
	Broker string
	Err    error
}

func (e *FallbackError) Error() string {
	var unverified *tls.CertificateVerificationError
	switch {
	case e.Broker == "":
		return fmt.Sprintf("goneli's own connection gave way to librdkafka: %v", e.Err)
	case errors.As(e.Err, &unverified):
		return fmt.Sprintf("goneli's own connection cannot verify the certificate of broker %s (%v), which librdkafka (OpenSSL) verifies by its own rules", e.Broker, e.Err)
	}
	return fmt.Sprintf("goneli's own connection cannot complete a TLS handshake with broker %s (%v), which librdkafka (OpenSSL) completes by its own rules", e.Broker, e.Err)
}

func (e *FallbackError) Unwrap() error { return e.Err }

// IsFallback reports whether err says that goneli's own connection gave way to librdkafka.
func IsFallback(err error) bool {
	var fe *FallbackError
	return errors.As(err, &fe)
}

// giveWay records the first TLS handshake that failed for a reason of TLS (handshakeRefused), and
// returns the *FallbackError that every request returns from then on.
//
// Such a failure is either one that librdkafka meets as well, and nothing is lost by leaving the
// work to it, or one that OpenSSL gets past and Go does not (a host named only in the subject's
// CN, a SHA-1 signature, a negative serial number, a broker that offers only TLS_RSA_* suites):
// then librdkafka is what reaches the broker. Nothing is ever sent over a connection whose
// handshake failed, and librdkafka verifies the certificate itself. The decision is for the
// client's life, so that no request tries the failed handshake again: a broker's TLS setup that
// librdkafka alone gets past does not change while the instance runs.
func (c *Client) giveWay(addr string, err error) error {
	fe := &FallbackError{Broker: addr, Err: err}
	if c.fallback.CompareAndSwap(nil, fe) && c.opts.OnFallback != nil {
		c.opts.OnFallback(fe)
	}
	return c.fallback.Load()
}

// GiveWay makes the connection give way to librdkafka for good, for the reason why, as a failed
// handshake does: the instance calls it when the connection keeps failing at what librdkafka does
// (internal/driver, sidefail.go). Requests under way end with their own results; from then on every
// request returns the *FallbackError. Only the first call counts.
func (c *Client) GiveWay(why error) {
	fe := &FallbackError{Err: why}
	if c.fallback.CompareAndSwap(nil, fe) && c.opts.OnFallback != nil {
		c.opts.OnFallback(fe)
	}
}

// Fallback is nil until the connection has given way to librdkafka, and then the
// *FallbackError that says why.
func (c *Client) Fallback() error {
	if fe := c.fallback.Load(); fe != nil {
		return fe
	}
	return nil
}

// Opened is how many connections the client has opened, Closed how many of them it has closed.
func (c *Client) Opened() int64 { return c.opened.Load() }

// Closed: see Opened.
func (c *Client) Closed() int64 { return c.closed.Load() }

// Settings are the client's connection settings.
func (c *Client) Settings() Settings { return c.settings }

// Close closes every connection and stops the client's goroutines; it is idempotent.
func (c *Client) Close() {
	c.closing.Do(func() {
		c.cl.Close()
		// Closing kgo's client ends the requests that bounded left behind.
		c.abandoned.Wait()
	})
}

// bounded runs fn, a request, and returns its result, or ctx's error once ctx ends, whichever comes
// first. kgo honours a request's context while the request waits to be sent, but not while its
// answer is awaited on a connection: a broker that went silent after the request was written
// (a zone outage, a black-holed link) holds it until kgo's own timeout, a lease. What outlives ctx
// finishes on its own, by that timeout or Close.
func (c *Client) bounded(ctx context.Context, fn func() (kmsg.Response, error)) (kmsg.Response, error) {
	type result struct {
		resp kmsg.Response
		err  error
	}
	done := make(chan result, 1)
	c.abandoned.Add(1)
	go func() {
		defer c.abandoned.Done()
		resp, err := fn()
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Request sends req where it belongs (kgo routes group requests to their coordinator, admin
// requests to the controller, and splits sharded ones), and retries the coordinator's errors
// that kgo returns for the request as a whole: kgo retries NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE when a group's result in the response
// carries them, but not when FindCoordinator, which it asks first, answers with them, as Apache
// Kafka does while it creates __consumer_offsets on a fresh cluster (KafkaApis.handleFindCoordinatorRequest).
func (c *Client) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if err := c.Fallback(); err != nil {
		return nil, err
	}
	var resp kmsg.Response
	err := c.retry(ctx, func() error {
		var err error
		resp, err = c.cl.Request(ctx, req)
		return err
	})
	if fe := c.Fallback(); fe != nil && err != nil {
		return nil, fe
	}
	return resp, err
}

// requestGroup sends req, a request about group alone, to the group's coordinator: the broker that
// answered the last such request, or else the one FindCoordinator names. It asks again while the
// answer (the group's result in it) says that the coordinator is not ready or is another broker
// now, and, of the broker FindCoordinator names then, when the request gets no answer and that is
// another broker: a coordinator that died, and whose group has moved. Other errors in the answer are
// the caller's to read.
//
// kgo would route the request itself, but it keeps the coordinators it has found and forgets one
// only when it answers that it no longer coordinates the group, which a broker that died never
// does: every description then went to the dead broker until it came back, long after the group
// had moved (found on Apache Kafka 4.4, realtest's TestBrokerCrash; TestDescribeAfterTheCoordinatorDied).
func (c *Client) requestGroup(ctx context.Context, group string, req kmsg.Request) (kmsg.Response, error) {
	if err := c.Fallback(); err != nil {
		return nil, err
	}
	var resp kmsg.Response
	err := c.retry(ctx, func() error {
		node, ok := c.coordinatorOf(group)
		if !ok {
			var err error
			if node, err = c.FindCoordinator(ctx, GroupCoordinator, group); err != nil {
				return err
			}
		}
		r, err := c.BrokerRequest(ctx, node, req)
		if err != nil {
			c.setCoordinator(group, node, false)
			var ke *kerr.Error
			if errors.As(err, &ke) || ctx.Err() != nil || IsFallback(err) {
				return err
			}
			// No answer, or kgo did not send the request (a broker that does not offer it, which
			// the caller tells): asked again only where the group has gone meanwhile.
			if moved, ferr := c.FindCoordinator(ctx, GroupCoordinator, group); ferr == nil && moved != node {
				c.setCoordinator(group, moved, true)
				return &coordinatorMoved{err}
			}
			return err
		}
		resp = r
		if err := kerr.ErrorForCode(groupErrorCode(r)); coordinatorNotReady(err) {
			c.setCoordinator(group, node, false)
			return err
		}
		c.setCoordinator(group, node, true)
		return nil
	})
	if fe := c.Fallback(); fe != nil && err != nil {
		return nil, fe
	}
	var moved *coordinatorMoved
	switch {
	case errors.As(err, &moved):
		return nil, moved.err
	case err != nil && resp != nil && coordinatorNotReady(err):
		// The coordinator still was not ready when the retries ran out: the answer says so.
		return resp, nil
	}
	return resp, err
}

// groupErrorCode is the error code of the one group in a description's answer.
func groupErrorCode(r kmsg.Response) int16 {
	switch r := r.(type) {
	case *kmsg.DescribeGroupsResponse:
		if len(r.Groups) == 1 {
			return r.Groups[0].ErrorCode
		}
	case *kmsg.ConsumerGroupDescribeResponse:
		if len(r.Groups) == 1 {
			return r.Groups[0].ErrorCode
		}
	}
	return 0
}

// setCoordinator notes node as group's coordinator, or forgets it (is false) if it is the one noted.
func (c *Client) setCoordinator(group string, node int32, is bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case is:
		c.coordinators[group] = node
	case c.coordinators[group] == node:
		delete(c.coordinators, group)
	}
}

// coordinatorOf is the broker that coordinates group as last found (requestGroup), if one was.
func (c *Client) coordinatorOf(group string) (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	node, ok := c.coordinators[group]
	return node, ok
}

// BrokerRequest sends req to the broker node as it is, without routing or retries, bounded by ctx
// even while the answer is awaited.
func (c *Client) BrokerRequest(ctx context.Context, node int32, req kmsg.Request) (kmsg.Response, error) {
	if err := c.Fallback(); err != nil {
		return nil, err
	}
	resp, err := c.bounded(ctx, func() (kmsg.Response, error) { return c.cl.Broker(int(node)).Request(ctx, req) })
	if fe := c.Fallback(); fe != nil && err != nil {
		return nil, fe
	}
	return resp, err
}

// SeedRequest sends req to the seed broker seed (an index into Settings.Seeds), without retries.
func (c *Client) SeedRequest(ctx context.Context, seed int, req kmsg.Request) (kmsg.Response, error) {
	seeds := c.cl.SeedBrokers()
	if seed < 0 || seed >= len(seeds) {
		return nil, fmt.Errorf("no seed broker %d", seed)
	}
	resp, err := seeds[seed].Request(ctx, req)
	if fe := c.Fallback(); fe != nil && err != nil {
		return nil, fe
	}
	return resp, err
}

// retry calls fn until it returns no coordinator error, ctx ends, or the client's Limit has
// passed.
func (c *Client) retry(ctx context.Context, fn func() error) error {
	giveUp := time.Now().Add(max(c.opts.Limit, time.Second))
	for tries := 0; ; tries++ {
		err := fn()
		if !coordinatorNotReady(err) || time.Now().After(giveUp) {
			return err
		}
		pause := min(c.settings.Backoff<<min(tries, 16), c.settings.BackoffMax)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// coordinatorNotReady reports whether err says to ask again shortly.
func coordinatorNotReady(err error) bool {
	var moved *coordinatorMoved
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.NotCoordinator) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.As(err, &moved)
}

// coordinatorMoved is a request to a group's coordinator that got no answer from a broker that
// FindCoordinator no longer names: it is asked again of the one it names.
type coordinatorMoved struct{ err error }

func (e *coordinatorMoved) Error() string { return e.err.Error() }
func (e *coordinatorMoved) Unwrap() error { return e.err }

// KafkaError makes a Kafka protocol error code a kafka.Error, whose codes are the protocol's for
// broker errors, so that callers treat it like one that librdkafka reports.
func KafkaError(code int16, msg *string) kafka.Error {
	text := kafka.ErrorCode(code).String()
	if msg != nil && *msg != "" {
		text += ": " + *msg
	}
	return kafka.NewError(kafka.ErrorCode(code), text, false)
}

// asKafkaError makes an error of kgo's that is a Kafka error code a kafka.Error; any other error
// is returned as it is.
func asKafkaError(err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return KafkaError(ke.Code, nil)
	}
	return err
}

// connCounter counts the connections a client opens and closes.
type connCounter struct{ opened, closed *atomic.Int64 }

func (h connCounter) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h.opened.Add(1)
	}
}

func (h connCounter) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { h.closed.Add(1) }

// Coordinator types of FindCoordinator.
const (
	GroupCoordinator       int8 = 0
	TransactionCoordinator int8 = 1
)

// FindCoordinator asks which broker coordinates key (a group, or a transactional id), retrying
// within ctx while the broker answers that the coordinator is not ready: Apache Kafka answers
// COORDINATOR_NOT_AVAILABLE while it creates the internal topic that holds the coordinator's
// state, on the first lookup in a fresh cluster (KafkaApis.handleFindCoordinatorRequest). An
// error the broker gives for key is a kafka.Error; Kafka checks Describe on the group or
// transactional id here.
func (c *Client) FindCoordinator(ctx context.Context, typ int8, key string) (int32, error) {
	var node int32
	err := c.retry(ctx, func() error {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType = typ
		req.CoordinatorKey = key
		req.CoordinatorKeys = []string{key}
		resp, err := c.Request(ctx, req)
		if err != nil {
			return err
		}
		r := resp.(*kmsg.FindCoordinatorResponse)
		if len(r.Coordinators) != 1 {
			return fmt.Errorf("FindCoordinator for one key answered with %d coordinators", len(r.Coordinators))
		}
		k := r.Coordinators[0]
		node = k.NodeID
		return kerr.ErrorForCode(k.ErrorCode)
	})
	return node, asKafkaError(err)
}

// AuthenticationFailed reports whether err says that the broker refused the client's SASL
// credentials: the broker's own error, or a connection closed once ApiVersions had been answered,
// which is how a broker may answer bad credentials (kfake does). kgo reports a connection closed
// before that as an *kgo.ErrFirstReadEOF.
func (c *Client) AuthenticationFailed(err error) bool {
	if c.settings.Mechanism == "" {
		return false
	}
	var first *kgo.ErrFirstReadEOF
	return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState) || errors.Is(err, io.EOF) && !errors.As(err, &first)
}
