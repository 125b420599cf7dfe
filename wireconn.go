package goneli

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// wireConn is one connection to one broker that goneli speaks the Kafka protocol on itself, for
// the group check (groupwire.go) and the doctor (doctor.go). It sends one request at a time and
// is not safe for use from several goroutines at once: its users take turns.
type wireConn struct {
	conn     net.Conn
	addr     string
	format   *kmsg.RequestFormatter
	corr     int32
	versions map[int16][2]int16 // by API key: the broker's lowest and highest version
}

// wireDialer is what it takes to open a wireConn: the client.id, TLS and SASL settings of the
// instance's own clients.
type wireDialer struct {
	clientID string
	network  string      // tcp, tcp4 or tcp6 (broker.address.family)
	tls      *tls.Config // nil in the clear
	sasl     *wireSASL   // nil without SASL
}

// wireSASL is a SASL mechanism that goneli can authenticate with itself.
type wireSASL struct {
	mechanism, user, password string
}

// maxWireResponse bounds a response's size: a description of a group of a few thousand members
// fits many times over, and a port of another service that answers with garbage cannot make the
// check allocate gigabytes.
const maxWireResponse = 64 << 20

// dial connects to addr, learns which API versions the broker supports, and authenticates.
func (d *wireDialer) dial(ctx context.Context, addr string) (*wireConn, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, d.network, addr)
	if err != nil {
		return nil, err
	}
	if d.tls != nil {
		cfg := d.tls.Clone()
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		conn = tc
	}
	w := &wireConn{conn: conn, addr: addr, format: kmsg.NewRequestFormatter(kmsg.FormatterClientID(d.clientID))}
	if err := w.learnVersions(ctx); err != nil {
		w.close()
		return nil, err
	}
	if d.sasl != nil {
		if err := w.authenticate(ctx, d.sasl); err != nil {
			w.close()
			// The broker's own refusal (a kafka.Error) says that SASL failed. Anything else needs
			// saying so: a broker may close the connection on bad credentials without an answer,
			// which would otherwise read as a server that is not Kafka.
			var refused kafka.Error
			if !errors.As(err, &refused) {
				err = fmt.Errorf("SASL %s authentication as %q with broker %s failed: %w", d.sasl.mechanism, d.sasl.user, addr, err)
			}
			return nil, err
		}
	}
	return w, nil
}

func (w *wireConn) close() { _ = w.conn.Close() }

// learnVersions asks for the broker's API versions at version 0, which every broker answers, and
// before authentication.
func (w *wireConn) learnVersions(ctx context.Context) error {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	resp, err := w.send(ctx, req)
	if err != nil {
		return err
	}
	r := resp.(*kmsg.ApiVersionsResponse)
	if r.ErrorCode != 0 {
		return fmt.Errorf("ApiVersions: %w", kafkaCode(r.ErrorCode, nil))
	}
	w.versions = map[int16][2]int16{}
	for _, k := range r.ApiKeys {
		w.versions[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	return nil
}

// version is the highest version of the request's API that both sides, and upTo, allow, and
// whether there is one.
func (w *wireConn) version(req kmsg.Request, upTo int16) (int16, bool) {
	v, ok := w.versions[req.Key()]
	top := min(upTo, req.MaxVersion(), v[1])
	return top, ok && top >= v[0]
}

// supports reports whether the broker offers the request's API at a version goneli can send.
func (w *wireConn) supports(req kmsg.Request, upTo int16) bool {
	_, ok := w.version(req, upTo)
	return ok
}

// request sends req at the highest version that both sides, and upTo, allow.
func (w *wireConn) request(ctx context.Context, req kmsg.Request, upTo int16) (kmsg.Response, error) {
	top, ok := w.version(req, upTo)
	if !ok {
		return nil, fmt.Errorf("broker %s does not offer API key %d at a version goneli sends", w.addr, req.Key())
	}
	req.SetVersion(top)
	return w.send(ctx, req)
}

// send writes one request and reads its response, within ctx.
func (w *wireConn) send(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DescribeTimeout)
	}
	_ = w.conn.SetDeadline(deadline)
	// A cancelled context ends a read or write under way at once.
	stop := context.AfterFunc(ctx, func() { _ = w.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	w.corr++
	if _, err := w.conn.Write(w.format.AppendRequest(nil, req, w.corr)); err != nil {
		return nil, fmt.Errorf("sending to broker %s: %w", w.addr, err)
	}
	var size [4]byte
	if _, err := io.ReadFull(w.conn, size[:]); err != nil {
		return nil, fmt.Errorf("reading from broker %s: %w", w.addr, err)
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > maxWireResponse {
		return nil, fmt.Errorf("broker %s answered with a frame of %d bytes, not a Kafka response", w.addr, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(w.conn, body); err != nil {
		return nil, fmt.Errorf("reading from broker %s: %w", w.addr, err)
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != w.corr {
		return nil, fmt.Errorf("broker %s answered request %d with %d", w.addr, w.corr, corr)
	}
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	// Flexible responses carry tagged fields after the header, except ApiVersions', whose header
	// stays at version 0 so that a client that sent too new a version can still read it.
	if resp.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		rest, err := skipTags(body)
		if err != nil {
			return nil, fmt.Errorf("broker %s: %w", w.addr, err)
		}
		body = rest
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("reading %s's response from broker %s: %w", kmsg.NameForKey(req.Key()), w.addr, err)
	}
	return resp, nil
}

// skipTags skips a header's tagged fields, which no response header has defined yet.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errors.New("truncated response header")
	}
	b = b[n:]
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errors.New("truncated response header")
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, errors.New("truncated response header")
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// authenticate runs a SASL exchange (KIP-152: SaslHandshake, then SaslAuthenticate).
func (w *wireConn) authenticate(ctx context.Context, s *wireSASL) error {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = s.mechanism
	resp, err := w.request(ctx, hs, 1)
	if err != nil {
		return err
	}
	if r := resp.(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		return fmt.Errorf("SASL mechanism %s refused by broker %s (it offers %s): %w",
			s.mechanism, w.addr, strings.Join(r.SupportedMechanisms, ", "), kafkaCode(r.ErrorCode, nil))
	}
	step := func(out []byte) ([]byte, error) {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SASLAuthBytes = out
		resp, err := w.request(ctx, req, 2)
		if err != nil {
			return nil, err
		}
		r := resp.(*kmsg.SASLAuthenticateResponse)
		if r.ErrorCode != 0 {
			return nil, fmt.Errorf("SASL %s authentication with broker %s failed: %w", s.mechanism, w.addr, kafkaCode(r.ErrorCode, r.ErrorMessage))
		}
		return r.SASLAuthBytes, nil
	}
	switch s.mechanism {
	case "PLAIN":
		_, err := step([]byte("\x00" + s.user + "\x00" + s.password))
		return err
	case "SCRAM-SHA-256":
		return scram(step, sha256.New, s.user, s.password, scramNonce())
	case "SCRAM-SHA-512":
		return scram(step, sha512.New, s.user, s.password, scramNonce())
	}
	return fmt.Errorf("SASL mechanism %s is not one goneli speaks itself", s.mechanism)
}

// scram authenticates by RFC 5802 (SCRAM, without channel binding), and checks the server's
// signature, so that a server that does not know the password cannot pass for the broker.
func scram(step func([]byte) ([]byte, error), h func() hash.Hash, user, password, nonce string) error {
	name := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(user)
	clientFirstBare := "n=" + name + ",r=" + nonce
	serverFirst, err := step([]byte("n,," + clientFirstBare))
	if err != nil {
		return err
	}
	attrs := map[byte]string{}
	for _, kv := range strings.Split(string(serverFirst), ",") {
		if len(kv) >= 2 && kv[1] == '=' {
			attrs[kv[0]] = kv[2:]
		}
	}
	salt, err := base64.StdEncoding.DecodeString(attrs['s'])
	iters, ierr := strconv.Atoi(attrs['i'])
	if err != nil || ierr != nil || iters <= 0 || !strings.HasPrefix(attrs['r'], nonce) {
		return fmt.Errorf("SCRAM: the broker's first message is malformed: %q", serverFirst)
	}
	salted, err := pbkdf2.Key(h, password, salt, iters, h().Size())
	if err != nil {
		return fmt.Errorf("SCRAM: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(h, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	sum := h()
	sum.Write(clientKey)
	storedKey := sum.Sum(nil)
	withoutProof := "c=biws,r=" + attrs['r']
	authMessage := clientFirstBare + "," + string(serverFirst) + "," + withoutProof
	proof := mac(storedKey, authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	serverFinal, err := step([]byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)))
	if err != nil {
		return err
	}
	want := "v=" + base64.StdEncoding.EncodeToString(mac(mac(salted, "Server Key"), authMessage))
	if !hmac.Equal(serverFinal, []byte(want)) {
		return fmt.Errorf("SCRAM: the broker's signature does not match (%q)", serverFinal)
	}
	return nil
}

// scramNonce is a client nonce of 144 random bits.
func scramNonce() string {
	var raw [18]byte
	_, _ = rand.Read(raw[:])
	return base64.RawStdEncoding.EncodeToString(raw[:])
}

// kafkaCode makes a Kafka protocol error code a kafka.Error, whose codes are the protocol's for
// broker errors, so that callers treat it like one that librdkafka reports.
func kafkaCode(code int16, msg *string) kafka.Error {
	text := kafka.ErrorCode(code).String()
	if msg != nil && *msg != "" {
		text += ": " + *msg
	}
	return kafka.NewError(kafka.ErrorCode(code), text, false)
}
