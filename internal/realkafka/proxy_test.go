package realkafka

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers each line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// roundTrip writes line and reads its echo, waiting up to limit; it reports a timeout as
// os.ErrDeadlineExceeded.
func roundTrip(c net.Conn, r *bufio.Reader, line string, limit time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(limit))
	defer c.SetReadDeadline(time.Time{})
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// A proxy relays both ways; cut, it holds what is sent on open connections and relays nothing of
// new ones, yet closes nothing; healed, all of it goes through.
func TestProxy(t *testing.T) {
	p, err := NewProxy()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetTarget(echoServer(t))
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	a, ra := dial()
	if got, err := roundTrip(a, ra, "before", awaitLimit); err != nil || got != "before" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}

	p.Cut()
	// Silence cannot be awaited: a short wait that passes on a slow machine as on a fast one.
	if got, err := roundTrip(a, ra, "during", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an open connection got %q, %v through the cut; want nothing", got, err)
	}
	b, rb := dial() // accepted, as a connection to a partitioned host is not refused at once
	if got, err := roundTrip(b, rb, "new", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a new connection got %q, %v through the cut; want nothing", got, err)
	}

	p.Heal()
	_ = a.SetReadDeadline(time.Now().Add(awaitLimit))
	if got, err := ra.ReadString('\n'); err != nil || got != "during\n" {
		t.Fatalf("after the heal, the line held: %q, %v", got, err)
	}
	_ = b.SetReadDeadline(time.Now().Add(awaitLimit))
	if got, err := rb.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("after the heal, the new connection's line: %q, %v", got, err)
	}
	if got, err := roundTrip(a, ra, "after", awaitLimit); err != nil || got != "after" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}

	// Close ends every relayed connection (and goleak, in TestMain, every goroutine).
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = a.SetReadDeadline(time.Now().Add(awaitLimit))
	if _, err := ra.ReadString('\n'); err == nil {
		t.Fatal("a relayed connection stayed open after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Listeners that Kafka would refuse, or that the cluster could not advertise, are refused before
// any node starts, naming the field.
func TestCheckListeners(t *testing.T) {
	for _, tc := range []struct {
		l    Listener
		want string // in the error; empty: none
	}{
		{Listener{Name: "MEMBER0"}, ""},
		{Listener{Name: "SASL", Protocol: "SASL_PLAINTEXT", Advertise: []string{"127.0.0.1:1"}}, ""},
		{Listener{Name: "member0"}, "upper-case"},
		{Listener{Name: ""}, "upper-case"},
		{Listener{Name: "PLAINTEXT"}, "taken"},
		{Listener{Name: "TLS", Protocol: "SSL"}, ""},
		{Listener{Name: "SECURE", Protocol: "SASL_SSL"}, ""},
		{Listener{Name: "TLS", Protocol: "TLS"}, "Protocol"},
		{Listener{Name: "TWO", Advertise: []string{"a:1", "b:2"}}, "2 addresses for 1 nodes"},
	} {
		err := checkListeners(Options{Nodes: 1, Listeners: []Listener{tc.l}})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.l, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Options.Listeners[0]")):
			t.Errorf("%+v: %v, want an error naming Options.Listeners[0] and saying %q", tc.l, err, tc.want)
		}
	}
	if err := checkListeners(Options{Nodes: 1, Listeners: []Listener{{Name: "A"}, {Name: "A"}}}); err == nil {
		t.Error("two listeners named A were not refused")
	}
}

// The request observer sees each request whole, however the stream was cut into reads.
func TestFrames(t *testing.T) {
	frame := func(body string) []byte {
		return append([]byte{0, 0, 0, byte(len(body))}, body...)
	}
	stream := append(append(append(frame("one"), frame("")...), frame("three")...), frame("fourth")...)
	for _, step := range []int{1, 2, 3, 7, len(stream)} {
		var got []string
		f := &frames{each: func(b []byte) { got = append(got, string(b)) }}
		for i := 0; i < len(stream); i += step {
			f.add(stream[i:min(i+step, len(stream))])
		}
		if want := []string{"one", "", "three", "fourth"}; strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("reads of %d bytes: got %q, want %q", step, got, want)
		}
	}
}
