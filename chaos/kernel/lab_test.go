package kernel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// prefix begins the name of every namespace and link the suite makes, followed by the test
// process's pid: a later run can then tell what a crashed run left (its pid is gone) from what a
// run under way uses, and remove only the former.
const prefix = "gnk"

// lab is the network the suite builds: a bridge in the test's own namespace, on whose address the
// broker listens, and one namespace per member slot, joined to the bridge by a veth pair. Its
// host-side end (host) carries the member's packets to the broker on ingress and the broker's to
// the member on egress; the member's end is eth0 in its namespace.
type lab struct {
	t      *testing.T
	pid    int
	bridge string
	net    string // the first three octets of the /24, "10.231.7"
	slots  []*slot
}

// slot is one member's namespace and link.
type slot struct {
	ns   string // namespace name, for `ip netns exec` and /run/netns
	host string // host-side veth
	ip   string // eth0's address
}

// hostIP is the bridge's address: the broker listens there.
func (l *lab) hostIP() string { return l.net + ".1" }

// run runs a command and returns its error with its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// must runs a command and fails the test if it fails.
func (l *lab) must(name string, args ...string) {
	l.t.Helper()
	if err := run(name, args...); err != nil {
		l.t.Fatal(err)
	}
}

// unsupported is the reason the suite cannot run here, or "".
func unsupported() string {
	if runtime.GOOS != "linux" {
		return "needs Linux"
	}
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, veth, iptables and BPF)"
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("needs %s on PATH (Debian: apt-get install iproute2 iptables)", tool)
		}
	}
	return ""
}

var (
	nsName   = regexp.MustCompile(`^` + prefix + `-(\d+)-\d+$`)
	linkName = regexp.MustCompile(`^` + prefix + `(\d+)(br|h\d+)$`)
)

// alive reports whether a process with that pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// sweep removes the namespaces and links that runs which are no longer running left behind
// (killed, or timed out before their cleanup ran), and what their member processes still run in
// those namespaces.
func sweep(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			name, _, _ := strings.Cut(sc.Text(), " ")
			m := nsName.FindStringSubmatch(name)
			if m == nil {
				continue
			}
			if pid, _ := strconv.Atoi(m[1]); alive(pid) {
				continue
			}
			killIn(name)
			if err := run("ip", "netns", "del", name); err != nil {
				t.Logf("sweeping %s: %v", name, err)
			} else {
				t.Logf("swept namespace %s, left by an earlier run", name)
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return
	}
	for _, i := range ifs {
		m := linkName.FindStringSubmatch(i.Name)
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); alive(pid) {
			continue
		}
		if err := run("ip", "link", "del", i.Name); err != nil {
			// A host end goes with its namespace's end, as the namespace swept above is destroyed.
			if !strings.Contains(err.Error(), "Cannot find device") {
				t.Logf("sweeping %s: %v", i.Name, err)
			}
		} else {
			t.Logf("swept link %s, left by an earlier run", i.Name)
		}
	}
}

// killIn kills every process in namespace ns: after a crashed run, its members (which end
// themselves when the harness goes, but may be frozen); after a run, none should be left.
func killIn(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// freeNet picks a /24 of 10.231.0.0/16 that no address of this host's namespace is in.
func freeNet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			ip := ipn.IP.To4()
			used[fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2])] = true
		}
	}
	// Start from the pid, so that two runs at once rarely try the same one.
	start := os.Getpid() % 250
	for i := range 250 {
		n := fmt.Sprintf("10.231.%d", (start+i)%250+1)
		if !used[n] {
			return n, nil
		}
	}
	return "", errors.New("no free /24 in 10.231.0.0/16")
}

// newLab builds the bridge and n namespaces, and removes them when the test ends. It skips the
// test if this host cannot make them.
func newLab(t *testing.T, n int) *lab {
	if why := unsupported(); why != "" {
		skip(t, why)
	}
	sweep(t)
	l := &lab{t: t, pid: os.Getpid()}
	l.bridge = fmt.Sprintf("%s%dbr", prefix, l.pid)
	var err error
	if l.net, err = freeNet(); err != nil {
		t.Fatal(err)
	}
	// The first namespace tells whether this host has them at all.
	probe := fmt.Sprintf("%s-%d-0", prefix, l.pid)
	if err := run("ip", "netns", "add", probe); err != nil {
		skip(t, fmt.Sprintf("cannot make a network namespace: %v", err))
	}
	t.Cleanup(l.destroy)
	if err := run("ip", "link", "add", l.bridge, "type", "bridge"); err != nil {
		skip(t, fmt.Sprintf("cannot make a bridge: %v", err))
	}
	// Only the addresses given here: no IPv6 link-local traffic to confuse the counts.
	disableIPv6("", l.bridge)
	l.must("ip", "addr", "add", l.hostIP()+"/24", "dev", l.bridge)
	l.must("ip", "link", "set", l.bridge, "up")
	for i := range n {
		s := &slot{ns: fmt.Sprintf("%s-%d-%d", prefix, l.pid, i), host: fmt.Sprintf("%s%dh%d", prefix, l.pid, i), ip: fmt.Sprintf("%s.%d", l.net, 10+i)}
		l.slots = append(l.slots, s)
		if i > 0 {
			l.must("ip", "netns", "add", s.ns)
		}
		peer := fmt.Sprintf("%s%dn%d", prefix, l.pid, i)
		if err := run("ip", "link", "add", s.host, "type", "veth", "peer", "name", peer, "netns", s.ns); err != nil {
			skip(t, fmt.Sprintf("cannot make a veth pair: %v", err))
		}
		disableIPv6("", s.host)
		disableIPv6(s.ns, "all")
		l.must("ip", "link", "set", s.host, "master", l.bridge, "up")
		l.must("ip", "-n", s.ns, "link", "set", peer, "name", "eth0")
		l.must("ip", "-n", s.ns, "addr", "add", s.ip+"/24", "dev", "eth0")
		l.must("ip", "-n", s.ns, "link", "set", "lo", "up")
		l.must("ip", "-n", s.ns, "link", "set", "eth0", "up")
		// Every packet of the member's goes through NFQUEUE queue 1 of its namespace, both ways.
		// --queue-bypass lets packets through while no reader is bound, so the rules cost nothing
		// until a delay fault binds one (delayer).
		for _, chain := range [][]string{{"OUTPUT", "-o"}, {"INPUT", "-i"}} {
			if err := run("ip", "netns", "exec", s.ns, "iptables", "-w", "-A", chain[0], chain[1], "eth0", "-j", "NFQUEUE",
				"--queue-num", strconv.Itoa(delayQueue), "--queue-bypass"); err != nil {
				skip(t, fmt.Sprintf("cannot queue packets to user space: %v", err))
			}
		}
	}
	return l
}

// disableIPv6 turns IPv6 off on dev in namespace ns ("" for the test's own).
func disableIPv6(ns, dev string) {
	key := "net.ipv6.conf." + dev + ".disable_ipv6=1"
	if ns == "" {
		_ = run("sysctl", "-qw", key)
		return
	}
	_ = run("ip", "netns", "exec", ns, "sysctl", "-qw", key)
}

// destroy removes everything newLab made; the iptables rules go with their namespaces, and the
// BPF links with the links they are attached to.
func (l *lab) destroy() {
	// The host ends first: deleting one end of a pair deletes both at once, where a deleted
	// namespace is destroyed, and its end with it, some time after the last process leaves it.
	for _, s := range l.slots {
		if _, err := net.InterfaceByName(s.host); err == nil {
			if err := run("ip", "link", "del", s.host); err != nil {
				l.t.Errorf("cleanup: %v", err)
			}
		}
	}
	for i := range len(l.slots) + 1 {
		ns := fmt.Sprintf("%s-%d-%d", prefix, l.pid, i)
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			continue
		}
		killIn(ns)
		if err := run("ip", "netns", "del", ns); err != nil {
			l.t.Errorf("cleanup: %v", err)
		}
	}
	if _, err := net.InterfaceByName(l.bridge); err == nil {
		if err := run("ip", "link", "del", l.bridge); err != nil {
			l.t.Errorf("cleanup: %v", err)
		}
	}
}

// inNS runs f on a thread that has entered namespace ns, and returns its error. Sockets made and
// BPF links attached by f belong to ns; interface indexes are ns's.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Left locked if the thread cannot return to the test's namespace: the runtime then ends
		// the thread with the goroutine rather than reuse it.
		back, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(back)
		target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering %s: %w", ns, err)
			return
		}
		ferr := f()
		if err := unix.Setns(back, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leaving %s: %w", ns, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// requireEnv, set to 1, turns every skip for want of kernel support into a failure, for a CI host
// that is known to have it.
const requireEnv = "KERNEL_FAULTS_REQUIRE"

func skip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("kernel fault suite cannot run here (%s=1): %s", requireEnv, why)
	}
	t.Skipf("kernel fault suite skipped: %s", why)
}
