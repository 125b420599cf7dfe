package goneli

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/obsidiandynamics/libstdgo/concurrent"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// State is the lifecycle stage of a Neli instance.
type State int32

const (
	// Live means the instance is contending for, or holding, leadership.
	Live State = iota

	// Closing means Close has begun: the instance no longer leads and is releasing its clients.
	Closing

	// Closed means the instance has left the group and closed its clients (or given up waiting
	// for them, see ErrCloseTimeout). The barrier may still be returning from its last event;
	// Await waits for that as well.
	Closed
)

// String names the state.
func (s State) String() string {
	switch s {
	case Live:
		return "Live"
	case Closing:
		return "Closing"
	case Closed:
		return "Closed"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Neli contends for leadership of one group on behalf of one process. It is safe for concurrent
// use.
type Neli interface {
	// IsLeader reports whether this instance holds a valid lease now. It reads atomics and the
	// monotonic clock, so it is cheap, never blocks, and turns false the moment the lease lapses
	// even if nobody is pulsing.
	IsLeader() bool

	// Pulse does the due Kafka work (polling, heartbeats, lease checks) and reports leadership. A
	// leader returns at once; a non-leader keeps pulsing until it becomes leader or timeout
	// passes, and then returns (false, nil). Errors are fatal: the instance cannot continue. They
	// include a *SessionTimeoutError when the broker refuses the group session that HeartbeatTimeout
	// implies.
	Pulse(timeout time.Duration) (bool, error)

	// PulseCtx is Pulse bounded by ctx. When ctx's deadline passes it returns (false, nil), as
	// Pulse does on timeout; when ctx is cancelled it returns (false, ctx.Err()), whether or not
	// the instance leads.
	PulseCtx(ctx context.Context) (bool, error)

	// Deadline is the throttle that keeps the consumer from being polled more often than
	// Config.MinPollInterval.
	Deadline() concurrent.Deadline

	// Close gives up leadership (IsLeader turns false and the barrier receives LeaderRevoked if
	// a tenure was acquired), then leaves the group so that a successor is elected at once, and
	// releases every client and goroutine. It is idempotent: later calls wait for the first to
	// finish and return its result. It returns within max.poll.interval.ms plus HeartbeatTimeout
	// (Config.CloseBound), whatever the broker or the barrier does (see ErrCloseTimeout and Barrier). A Close made
	// while the barrier is being called (from the barrier itself, or from another goroutine) does
	// not wait for that call: it returns once the instance has left the group, and the remaining
	// events follow when the call returns; Await waits for those as well.
	Close() error

	// Await blocks until the instance is Closed, the barrier has returned from its last event and
	// every Kafka client the instance made has finished closing, or until the close bound (see
	// Close), counted from the first Close, has passed.
	Await()

	// State reports the lifecycle stage.
	State() State

	// Background starts a goroutine that pulses continually and runs task whenever this
	// instance leads. See Pulser.
	Background(task LeaderTask) (Pulser, error)
}

// neli is the instance behind the Neli, Curator and Roles interfaces. It keeps what the API needs:
// the parts whose leases IsLeader, Token and Stats read, the dispatchers that call the application,
// the pulse loop's throttle and wake-up, and the lifecycle that Close moves on. Everything Kafka is
// the driver's (internal/driver); the close sequence is in closer.go here and there.
type neli struct {
	config  Config
	barrier Barrier
	log     scribe.Scribe
	// parts are the roles contended for, by partition number: a single one for New, whose lease is
	// what the Neli and Curator methods report.
	parts  []*part
	events dispatchers // one per part, in the same order
	d      *driver.Driver
	life   *lifecycle

	pollDeadline concurrent.Deadline
	// leaderSignal wakes a waiting Pulse when the barrier has returned from any LeaderAcquired.
	leaderSignal chan struct{}
}

// New validates config, makes sure the leader topic exists and that no member of the group uses
// another one, under KIP-848 (group.protocol=consumer) that the broker's session timeout covers
// HeartbeatTimeout (see the package doc's Guarantees), and joins the group. It does not wait for leadership; call Pulse or Background for
// that. New is bounded in time: an unreachable broker costs at most one HeartbeatTimeout spent
// looking for the topic, after which New succeeds, Pulse keeps trying and Stats reports Kafka
// unreachable (UnreachableSince) until a broker answers. Bootstrap servers that accept connections
// but do not answer as Kafka, whether they answer otherwise or not at all, cost up to two seconds
// more each, and New fails with a NotKafkaError.
//
// The instance contends for one leadership, partition 0 of the leader topic. It is the one-role
// case of NewRoles, whose events have an empty Role.
func New(config Config, barrier ...Barrier) (Neli, error) {
	n, err := newInstance(config, []string{""}, "", barrier)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// newInstance joins the group on behalf of an instance that contends for roles, role i being
// partition i of the leader topic. digest names the role list in the group (see rolesDigest); it
// is empty for the single unnamed role of New.
func newInstance(config Config, roles []string, digest string, barrier []Barrier) (*neli, error) {
	n, err := assemble(config, digest, roles, barrier, core.SystemClock{})
	if err != nil {
		return nil, err
	}
	if err := n.d.Join(); err != nil {
		n.d.Abandon()
		return nil, err
	}
	n.startDispatchers()
	what := fmt.Sprintf("%d roles", len(n.parts))
	if digest == "" {
		what = "leadership"
	}
	// The driver's timing, not the one New was given: joining may have raised the session to the
	// brokers' minimum (fitSession) or read KIP-848's from the brokers.
	c := n.config
	n.log.I()("goneli %s: contending for %s of group %s on topic %s (lease %v, %s)",
		c.Name, what, c.LeaderGroupID, c.LeaderTopic, *c.HeartbeatTimeout, n.d.Timing().Describe())
	return n, nil
}

// assemble derives from config what every part of an instance needs, once (Config.derive), and
// builds the instance and its driver from that, without I/O: the driver joins the group in Join.
// digest names the role list (empty for New). Tests of the driver assemble one on clients of their
// own (driver_test.go).
func assemble(config Config, digest string, roles []string, barrier []Barrier, clk core.Clock) (*neli, error) {
	dv, err := config.derive(digest)
	if err != nil {
		return nil, err
	}
	config = dv.config
	n := &neli{
		config:       config,
		barrier:      NopBarrier(),
		log:          config.Scribe,
		life:         newLifecycle(),
		pollDeadline: concurrent.NewDeadline(*config.MinPollInterval),
		leaderSignal: make(chan struct{}, 1),
	}
	if len(barrier) > 0 && barrier[0] != nil {
		n.barrier = barrier[0]
	}
	shell := dv.shell
	if config.OnLeaderChange != nil {
		shell.OnLeader = n.leaderChanged
	}
	base := clk.Now()
	var machineRoles []*core.Role
	for _, r := range core.NewRoles(shell.Settings, shell.Timing, roles, clk, base) {
		n.parts = append(n.parts, &part{Role: r, signal: make(chan struct{}, 1)})
		machineRoles = append(machineRoles, r)
	}
	n.d = driver.New(shell, machineRoles, n.life, n.deliverTenure, clk, base)
	return n, nil
}

// leaderChanged takes a change of leader that the driver's observer saw to OnLeaderChange, on the
// first role's dispatcher, which calls the application one call at a time.
func (n *neli) leaderChanged(l driver.Leader) {
	n.parts[0].events.post(func() { n.config.OnLeaderChange(LeaderInfo(l)) })
}

// deliverTenure takes what the machine delivers for role r (the driver's deliverTo) to its part.
func (n *neli) deliverTenure(r *core.Role, events []core.TenureEvent, dl *core.Delivery) {
	n.deliver(n.parts[r.ID], publicEvents(events), dl)
}

// part is one role as the API and the shell see it: the machine's role (its partition, its lease,
// what the machine keeps beside it), the dispatcher that calls the barrier with its events, and
// what the API keeps beside them. The driver finds roles by partition and walks them in order
// (neli.parts holds them in the same order).
type part struct {
	*core.Role
	events *dispatcher
	// signal wakes the role's Background task when the barrier has returned from LeaderAcquired.
	signal chan struct{}
	// acquiring is the epoch of the newest LeaderAcquired whose barrier call has begun
	// (acquisitionStands). Written and read on the role's dispatcher goroutine.
	acquiring atomic.Uint64
	// hooks are the FencedProducers bound to the role, initialised at each LeaderAcquired.
	hooks acquireHooks
}

// startDispatchers gives every part the goroutine that calls the application with its events.
func (n *neli) startDispatchers() {
	for _, p := range n.parts {
		p.events = newDispatcher()
		n.events = append(n.events, p.events)
	}
}

// IsLeader reports on the first role, the only one of an instance made by New.
func (n *neli) IsLeader() bool {
	return n.isLeaderOf(n.parts[0])
}

// isLeaderOf is IsLeader for one role.
func (n *neli) isLeaderOf(p *part) bool {
	return n.State() == Live && !n.d.Yielding() && p.Lease.IsLeader()
}

// leadsAny reports whether this instance leads at least one role.
func (n *neli) leadsAny() bool {
	for _, p := range n.parts {
		if n.isLeaderOf(p) {
			return true
		}
	}
	return false
}

func (n *neli) State() State {
	return n.life.state()
}

func (n *neli) Deadline() concurrent.Deadline {
	return n.pollDeadline
}

func (n *neli) Pulse(timeout time.Duration) (bool, error) {
	return n.pulse(nil, nil, timeout)
}

func (n *neli) PulseCtx(ctx context.Context) (bool, error) {
	return n.pulse(ctx.Done(), ctx.Err, -1)
}

// pulse runs due cycles until this instance leads, the timeout (if not negative) passes, done is
// closed, or the instance closes.
func (n *neli) pulse(done <-chan struct{}, doneErr func() error, timeout time.Duration) (bool, error) {
	start := n.d.Now()
	var timer *time.Timer
	for {
		if n.State() != Live {
			return false, ErrNonLivePulse
		}
		select {
		case <-done:
			// Checked before anything else, so that a leader too answers an ended context as
			// PulseCtx's doc says, rather than with its leadership.
			return false, ctxResult(doneErr())
		default:
		}
		limit := time.Duration(-1)
		if timeout >= 0 {
			limit = max(timeout-(n.d.Now()-start), 0)
		}
		if err := n.pulseOnce(limit); err != nil {
			return false, err
		}
		if n.leadsAny() {
			return true, nil
		}
		wait := n.cycleWait()
		if timeout >= 0 {
			left := timeout - (n.d.Now() - start)
			if left <= 0 {
				return false, nil
			}
			wait = min(wait, left)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-done:
			timer.Stop()
			return false, ctxResult(doneErr())
		case <-n.life.closing:
			timer.Stop()
			return false, ErrNonLivePulse
		case <-n.leaderSignal:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// ctxResult is what PulseCtx returns for its context's error: nothing for a deadline, which ends a
// pulse like Pulse's timeout, and the error itself for a cancellation.
func ctxResult(err error) error {
	if err == context.DeadlineExceeded {
		return nil
	}
	return err
}

// pulseOnce runs a cycle if one is due, waiting in the consumer's poll for at most limit (if not
// negative) beyond PollDuration.
func (n *neli) pulseOnce(limit time.Duration) error {
	// Most calls from a leader's loop find nothing due. Checking first keeps them free of the two
	// heap allocations that the closure below costs (see BenchmarkLeader/PulseNotDue).
	if n.pollDeadline.Expired() {
		return n.runCycle(limit)
	}
	if n.d.Proving() {
		return n.d.Step(*n.config.PollDuration, 0)
	}
	return nil
}

// cycleWait is how long a pulsing loop may wait before its next cycle is due.
func (n *neli) cycleWait() time.Duration {
	if n.d.Proving() {
		return core.ProofPoll
	}
	return max(n.pollDeadline.Remaining(), time.Millisecond)
}

// runCycle runs a cycle unless another goroutine has just claimed the poll deadline.
func (n *neli) runCycle(limit time.Duration) (err error) {
	n.pollDeadline.TryRun(func() {
		err = n.d.Step(-1, limit)
	})
	return err
}

// deliver posts the events of a transition of p's lease to the application, in order.
// LeaderAcquired becomes visible to IsLeader once its barrier call has returned. It returns the
// delivery of the last event, if any.
func (n *neli) deliver(p *part, events []Event, dl *core.Delivery) {
	var calls []func()
	for _, e := range events {
		n.log.I()("goneli %s: %v", n.config.Name, e)
		call := func() { n.barrier(e) }
		if _, ok := e.(LeaderAcquired); ok {
			l := p.Lease
			epoch := l.Epoch
			token := e.(LeaderAcquired).Token
			call = func() {
				p.acquiring.Store(epoch)
				// Before the barrier and IsLeader: once this instance leads, no earlier tenure's
				// FencedProducer can commit.
				p.hooks.run(token)
				n.barrier(e)
				l.AcquiredDelivered(epoch)
				for _, s := range []chan struct{}{n.leaderSignal, p.signal} {
					select {
					case s <- struct{}{}:
					default:
					}
				}
			}
		}
		calls = append(calls, call)
	}
	p.events.postAs(dl, calls...)
}

// acquisitionStands reports, from within the barrier's call for a LeaderAcquired of role, whether
// that acquisition still stands: its lease is held and has not run out, nothing has fenced or ended
// it since (a later acquisition of the same tenure is another one), and the instance is neither
// closing nor yielding. It is what IsLeader will say once the call returns, except that the event
// that ends the acquisition may come at any moment after.
func (n *neli) acquisitionStands(role string) bool {
	for _, p := range n.parts {
		if p.Name == role {
			v := p.Lease.Load()
			return n.State() == Live && !n.d.Yielding() && v.Leading && v.Epoch == p.acquiring.Load() && n.d.Now() < v.End
		}
	}
	return false
}
