package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// This kernel has neither netem nor fq (the qdisc that would release a packet at a departure time
// a BPF program sets), so a delay is made in user space: iptables rules in each member's namespace
// send every packet of eth0, both ways, to NFQUEUE queue delayQueue, and a delayer bound to that
// queue gives each packet its verdict (accept) only once its delay has passed. The kernel holds the
// packet meanwhile; only its ID crosses to user space.

// delayQueue is the NFQUEUE queue of every member namespace (queues are per namespace).
const delayQueue = 1

// Netlink constants of nfnetlink_queue (include/uapi/linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue      = 3
	nfqnlMsgPacket       = nfnlSubsysQueue<<8 | 0
	nfqnlMsgVerdict      = nfnlSubsysQueue<<8 | 1
	nfqnlMsgConfig       = nfnlSubsysQueue<<8 | 2
	nfqaCfgCmd           = 1
	nfqaCfgParams        = 2
	nfqaCfgQueueMaxlen   = 3
	nfqnlCfgCmdBind      = 1
	nfqnlCopyMeta        = 1
	nfqaPacketHdr        = 1
	nfqaVerdictHdr       = 2
	nfAccept             = 1
	delayQueueMaxPackets = 16384
)

// delayer holds the packets of one namespace's queue for a delay of delay ± jitter each.
//
// The jitter is not drawn per packet: the delay follows a triangle wave between delay-jitter and
// delay+jitter whose slope is 1/5, so that no packet is released before one queued earlier.
// netem-style random jitter per packet reorders a TCP flow's segments, which adds duplicate
// acknowledgements and retransmissions to the delay; a path whose delay varies does not reorder.
// The wave's period is 20 x jitter: 2 s for 100 ms.
type delayer struct {
	fd            int
	delay, jitter time.Duration
	start         time.Time

	mu       sync.Mutex
	held     []held
	wake     chan struct{} // a packet was added to held
	draining bool          // release new packets at once; end when none is held
	done     chan struct{} // closed when both loops have ended
	err      error
}

type held struct {
	id      uint32
	release time.Time
}

// startDelay binds a delayer to namespace ns's queue.
func startDelay(ns string, delay, jitter time.Duration) (*delayer, error) {
	if jitter < 0 || jitter > delay {
		return nil, fmt.Errorf("jitter %v must be within 0 and the delay %v", jitter, delay)
	}
	d := &delayer{fd: -1, delay: delay, jitter: jitter, start: time.Now(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	// The socket belongs to the namespace it is made in, and so does the queue it binds.
	err := inNS(ns, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		d.fd = fd
		return unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	})
	if err == nil {
		err = d.configure()
	}
	if err != nil {
		if d.fd >= 0 {
			_ = unix.Close(d.fd)
		}
		return nil, fmt.Errorf("binding NFQUEUE %d in %s: %w", delayQueue, ns, err)
	}
	var loops sync.WaitGroup
	loops.Add(2)
	go func() { defer loops.Done(); d.read() }()
	go func() { defer loops.Done(); d.release() }()
	go func() {
		loops.Wait()
		_ = unix.Close(d.fd)
		close(d.done)
	}()
	return d, nil
}

// configure binds the queue, asks for packet metadata only, and sets how many packets the kernel
// may hold: at 400 ms a member's traffic is a few hundred.
func (d *delayer) configure() error {
	// Lost notifications would leave packets held until the queue is unbound: never drop them.
	_ = unix.SetsockoptInt(d.fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	_ = unix.SetsockoptInt(d.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	// Reads time out so that the reader notices a drain.
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	if err := unix.SetsockoptTimeval(d.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	// One message binds the queue and configures it, so that the one answer to wait for comes
	// before or among the first packets (handled, not dropped, meanwhile).
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}
	params := binary.BigEndian.AppendUint32(nil, 0)
	params = append(params, nfqnlCopyMeta)
	maxlen := binary.BigEndian.AppendUint32(nil, delayQueueMaxPackets)
	return d.request(nfqnlMsgConfig, true, attr(nfqaCfgCmd, cmd), attr(nfqaCfgParams, params), attr(nfqaCfgQueueMaxlen, maxlen))
}

// attr encodes one netlink attribute, padded to 4 bytes.
func attr(typ uint16, payload []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(payload)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// request sends one nfnetlink message to the queue and, if ack, waits for the kernel's answer.
func (d *delayer) request(typ uint16, ack bool, attrs ...[]byte) error {
	body := []byte{unix.AF_UNSPEC, 0 /* NFNETLINK_V0 */}
	body = binary.BigEndian.AppendUint16(body, delayQueue)
	for _, a := range attrs {
		body = append(body, a...)
	}
	flags := uint16(unix.NLM_F_REQUEST)
	if ack {
		flags |= unix.NLM_F_ACK
	}
	msg := binary.NativeEndian.AppendUint32(nil, uint32(unix.NLMSG_HDRLEN+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, flags)
	msg = binary.NativeEndian.AppendUint32(msg, 0) // sequence
	msg = binary.NativeEndian.AppendUint32(msg, 0) // port: the kernel
	msg = append(msg, body...)
	if err := unix.Sendto(d.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	if !ack {
		return nil
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		d.hold(msgs, time.Now())
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
				if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return unix.Errno(-errno)
				}
				return nil
			}
		}
	}
}

// delayAt is the delay of a packet queued at t.
func (d *delayer) delayAt(t time.Time) time.Duration {
	if d.jitter == 0 {
		return d.delay
	}
	period := 20 * d.jitter
	phase := t.Sub(d.start)%period - period/2
	if phase < 0 {
		phase = -phase
	}
	return d.delay - d.jitter + phase/5
}

// read takes the queue's packet notifications and holds each packet until its release time.
func (d *delayer) read() {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		now := time.Now()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			d.mu.Lock()
			end := d.draining && len(d.held) == 0
			d.mu.Unlock()
			if end {
				return
			}
			continue
		}
		if err != nil {
			d.fail(err)
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			d.fail(err)
			return
		}
		d.hold(msgs, now)
		d.mu.Lock()
		end := d.draining && len(d.held) == 0
		d.mu.Unlock()
		if end {
			// Done even while packets keep coming: once unbound, the rules let them through.
			return
		}
	}
}

// hold holds the packets that msgs notify of, queued at now, until their release time.
func (d *delayer) hold(msgs []syscall.NetlinkMessage, now time.Time) {
	added := false
	var atOnce []uint32 // the delay is over: let them go now
	d.mu.Lock()
	for _, m := range msgs {
		if m.Header.Type != nfqnlMsgPacket || len(m.Data) < 4 {
			continue
		}
		id, ok := packetID(m.Data[4:])
		if !ok {
			continue
		}
		if d.draining {
			atOnce = append(atOnce, id)
			continue
		}
		d.held = append(d.held, held{id: id, release: now.Add(d.delayAt(now))})
		added = true
	}
	d.mu.Unlock()
	for _, id := range atOnce {
		d.accept(id)
	}
	if added {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// packetID finds the packet ID in a packet notification's attributes.
func packetID(attrs []byte) (uint32, bool) {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs))
		typ := binary.NativeEndian.Uint16(attrs[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(attrs) {
			return 0, false
		}
		if typ == nfqaPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(attrs[4:]), true
		}
		l = (l + 3) &^ 3
		if l > len(attrs) {
			break
		}
		attrs = attrs[l:]
	}
	return 0, false
}

// release accepts each held packet at its release time, in the order they were queued.
func (d *delayer) release() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		if len(d.held) == 0 {
			end := d.draining || d.err != nil
			d.mu.Unlock()
			if end {
				return
			}
			select {
			case <-d.wake:
			case <-timer.C:
			}
			continue
		}
		next := d.held[0]
		d.mu.Unlock()
		if wait := time.Until(next.release); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-d.wake:
				// Something changed (a packet added, a drain begun): look again.
				timer.Stop()
				continue
			}
		}
		d.accept(next.id)
		d.mu.Lock()
		d.held = d.held[1:]
		d.mu.Unlock()
	}
}

// accept lets packet id go on.
func (d *delayer) accept(id uint32) {
	verdict := binary.BigEndian.AppendUint32(nil, nfAccept)
	verdict = binary.BigEndian.AppendUint32(verdict, id)
	if err := d.request(nfqnlMsgVerdict, false, attr(nfqaVerdictHdr, verdict)); err != nil {
		d.fail(err)
	}
}

func (d *delayer) fail(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.mu.Unlock()
}

// Close ends the delay: packets already held are released at their time, as a path whose delay
// ends still delivers what was in flight, and later ones at once; once none is held the queue is
// unbound, after which the rules let packets through (--queue-bypass). It returns the first error
// of the loops.
func (d *delayer) Close() error {
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}
