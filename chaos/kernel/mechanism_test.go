package kernel

import (
	"math"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// connectTime measures one TCP connect from namespace ns to addr: a round trip (SYN out, SYN-ACK
// back) in the kernel, with no application in the way. limit bounds it; a cut path times out.
func connectTime(ns, addr string, limit time.Duration) (time.Duration, error) {
	var d time.Duration
	err := inNS(ns, func() error {
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, limit)
		d = time.Since(start)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return d, err
}

// TestFaultMechanisms checks that each network fault does what the suite takes it to do, measured
// on a TCP connect between a namespace and the broker's address: the delay adds its delay in each
// direction, a drop in either direction cuts the path, and everything is back once the programs
// are detached.
func TestFaultMechanisms(t *testing.T) {
	l := newLab(t, 1)
	drop := loadDrop(t)
	ln, err := net.Listen("tcp", l.hostIP()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	s := l.slots[0]
	addr := ln.Addr().String()
	clean, err := cleanConnect(s.ns, addr)
	if err != nil {
		t.Fatalf("connect without a fault: %v", err)
	}
	if clean > 100*time.Millisecond {
		t.Fatalf("connect without a fault took %v at best", clean)
	}

	var a attachment
	defer a.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, jitter := range []time.Duration{0, 100 * time.Millisecond} {
		d, err := startDelay(s.ns, 400*time.Millisecond, jitter)
		must(err)
		var took []time.Duration
		for range 3 {
			delayed, err := connectTime(s.ns, addr, 5*time.Second)
			if err != nil {
				t.Fatalf("connect delayed: %v", err)
			}
			took = append(took, delayed)
		}
		must(d.Close())
		t.Logf("TCP connect: %v without a fault, %v with 400 ms ± %v each way", clean, took, jitter)
		// A round trip crosses the delay twice.
		for _, delayed := range took {
			if lo, hi := 2*(400*time.Millisecond-jitter), 2*(400*time.Millisecond+jitter)+200*time.Millisecond; delayed < lo || delayed > hi {
				t.Errorf("delayed connect took %v; want %v to %v", delayed, lo, hi)
			}
		}
	}

	for _, cut := range []struct {
		name, ns, dev string
	}{{"member to broker", "", s.host}, {"broker to member", s.ns, "eth0"}} {
		must(a.attach(cut.ns, cut.dev, drop, ebpf.AttachTCXIngress))
		if d, err := connectTime(s.ns, addr, time.Second); err == nil {
			t.Errorf("%s dropped: connect succeeded after %v", cut.name, d)
		}
		must(a.Close())
	}
	if d, err := cleanConnect(s.ns, addr); err != nil || d > 100*time.Millisecond {
		t.Errorf("after the faults: connect %v at best, %v", d, err)
	}
}

// cleanConnect is how long a TCP connect from ns to addr takes with no fault: the best of three,
// after the first that succeeds. A new namespace's first SYN can be lost while its link comes up
// (1.04 s, one retransmission, in a .ci/stress run), and a loaded machine can hold up any single
// connect; neither is what the baseline is for.
func cleanConnect(ns, addr string) (time.Duration, error) {
	if _, err := connectTime(ns, addr, 5*time.Second); err != nil {
		return 0, err
	}
	best := time.Duration(math.MaxInt64)
	for range 3 {
		d, err := connectTime(ns, addr, 5*time.Second)
		if err != nil {
			return 0, err
		}
		best = min(best, d)
	}
	return best, nil
}

// loadDrop loads the drop program, or skips the test where BPF or tcx is missing.
func loadDrop(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := dropProgram()
	if err != nil {
		skip(t, "cannot load a BPF program: "+err.Error())
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
