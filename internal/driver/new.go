package driver

import (
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/sidechan"
)

// Life is the instance's progress through Close as the driver needs it (the root package's
// lifecycle type).
type Life interface {
	// Live reports whether Close has yet to begin.
	Live() bool
	// Closing is closed when Close begins; it ends the driver's waits for the barrier.
	Closing() <-chan struct{}
	// FromBarrier is closed when Close was called while the barrier was being called: the close
	// sequence then waits for no barrier call.
	FromBarrier() <-chan struct{}
}

// Setup is what New derived of a goneli.Config for the shell: its Config, the group timing, what
// the machine needs, the librdkafka configurations of the three clients, whether librdkafka's log
// lines go to the Scribe, and whether the instance follows the other leaders (goneli's
// Config.ObserveLeader, or an OnLeaderChange: OnLeader, called from the cycle).
type Setup struct {
	Config                    Config
	Timing                    core.GroupTiming
	Settings                  core.Settings
	Consumer, Producer, Admin kafka.ConfigMap
	ForwardLogs               bool
	Observe                   bool
	OnLeader                  func(Leader)
}

// New builds the driver of roles (by partition) from s, without I/O: Join joins the group. The
// roles' leases run on clk from base, as the driver's own times do; deliverTo takes the events the
// machine delivers to the application.
func New(s Setup, roles []*core.Role, life Life, deliverTo func(r *core.Role, events []core.TenureEvent, dl *core.Delivery),
	clk core.Clock, base time.Time) *Driver {
	config, timing := s.Config, s.Timing
	d := &Driver{
		config:    config,
		timing:    timing,
		log:       config.Scribe,
		topic:     config.LeaderTopic,
		key:       []byte(config.Name),
		parts:     roles,
		life:      life,
		deliverTo: deliverTo,
		clock:     clk,
		base:      base,
		observe:   s.Observe,
		onLeader:  s.OnLeader,
	}
	d.m = core.NewMachine(s.Settings, timing, roles, d, clk, base)
	d.throttle.Every = 10 * time.Second
	d.logs = StartLogForwarder(d.log, config.Name, s.ForwardLogs)
	d.logs.Attach(s.Consumer)
	d.logs.Attach(s.Producer)
	// The admin client cannot forward its logs; its failures come back as errors anyway.
	s.Admin["log_level"] = 0
	d.confs = clientConfs{consumer: FromKafkaConfigMap(s.Consumer), producer: FromKafkaConfigMap(s.Producer), admin: FromKafkaConfigMap(s.Admin)}
	d.clientID = fmt.Sprint(s.Consumer["client.id"])
	d.m.ClientID = d.clientID
	d.check.checker = newGroupChecker()
	side, err := sidechan.New(s.Admin, sidechan.Options{ConsumerProtocol: !timing.Classic, Limit: *config.HeartbeatTimeout,
		OnFallback: func(why error) { d.log.W()("goneli %s: %s", config.Name, ViaLibrdkafka(why)) }})
	if err == nil {
		d.check.wire = side
		if len(roles) > 1 {
			d.wire = sidechan.NewBeats[wireBeat](side, d.topic, d.releaseFlush(), *config.MinPollInterval, &d.closers)
		}
	} else {
		d.log.I()("goneli %s: %s", config.Name, ViaLibrdkafka(err))
	}
	d.alarm = newWatchdog(d.now, d.ring, life.Closing())
	return d
}

// Join makes sure that the leader topic exists and that the group agrees with this instance, joins
// it (topic.go), and starts following the other leaders if asked to (Setup.Observe). After an
// error, Abandon lets go of what the driver holds.
func (d *Driver) Join() error {
	if err := d.join(); err != nil {
		return err
	}
	if !d.observe {
		return nil
	}
	onLeader := d.onLeader
	if onLeader == nil {
		onLeader = func(Leader) {}
	}
	o, err := NewObserver(d.config, ObserverConfig(ToKafkaConfigMap(*d.confs.consumer)), len(d.parts), onLeader)
	if err != nil {
		return err
	}
	d.observer = o
	return nil
}

// Abandon lets go of what a driver that will never run holds: the group check, goneli's own
// connection, the consumer if Join made one, and the log forwarder.
func (d *Driver) Abandon() {
	if d.consumer != nil {
		_ = d.consumer.Close()
	}
	d.check.checker.stop()
	d.closeSide()
	d.logs.Close()
}

// Leader is the leader of partition p as the observer last saw it, if the instance observes
// (Setup.Observe). Safe without mu.
func (d *Driver) Leader(p int32) (Leader, bool) {
	if d.observer == nil {
		return Leader{}, false
	}
	return d.observer.Current(p)
}

// Timing is the group timing the driver runs on: New's, with what Join read of the brokers.
func (d *Driver) Timing() core.GroupTiming {
	return d.timing
}

// Machine is the driver's machine, for what may be read of it without its lock (its counters).
func (d *Driver) Machine() *core.Machine {
	return d.m
}

// Now is the time on the driver's clock, the monotonic scale that leases, yields and the close
// bound are measured in. Safe without mu.
func (d *Driver) Now() time.Duration {
	return d.now()
}

// Base is the origin of the driver's clock, which Now measures from.
func (d *Driver) Base() time.Time {
	return d.base
}

// Step runs one cycle, unless Close has begun, waiting in the poll for up to poll, or, if poll is
// negative, for as long as an idle instance may (within limit, if that is not negative).
func (d *Driver) Step(poll, limit time.Duration) error {
	return d.step(poll, limit)
}

// Proving reports whether a tenure of this instance is proving its first lease, when the pulse loop
// cycles every core.ProofPoll. Safe without mu.
func (d *Driver) Proving() bool {
	return d.proving()
}

// Yielding reports whether the instance is yielding (Yield, a hand-over, a transfer).
func (d *Driver) Yielding() bool {
	return d.yielding()
}

// RequestYield is Yield for dur; inCall says that the barrier is being called.
func (d *Driver) RequestYield(dur time.Duration, inCall bool) {
	d.requestYield(dur, inCall)
}

// TransferTo is Curator.TransferTo for role r (the only one); inCall says that the barrier is
// being called.
func (d *Driver) TransferTo(r *core.Role, name string, inCall bool) error {
	return d.transferTo(r, name, inCall)
}

// Counters are what the driver counts and knows beside the machine, for Stats.
type Counters struct {
	GroupDescriptions, Transfers uint64
	Standby                      bool
	// UnreachableSince is when Kafka was found unreachable, with why; zero while it answers.
	UnreachableSince  time.Time
	UnreachableReason string
}

// Counters reads the driver's counters. Safe without mu.
func (d *Driver) Counters() Counters {
	c := Counters{
		GroupDescriptions: d.prio.descriptions.Load(),
		Transfers:         d.prio.transfers.Load(),
		Standby:           d.prio.isStandby.Load(),
	}
	if since, reason, down := d.reach.state(); down {
		c.UnreachableSince, c.UnreachableReason = d.base.Add(since), reason
	}
	return c
}

// CloseBound is how long Close may take: the rebalance timeout plus one HeartbeatTimeout.
func (d *Driver) CloseBound() time.Duration {
	return d.closeBound()
}

// Leave ends every tenure, leaves the group and closes the consumers by deadline, on the driver's
// clock (closer.go), and returns what went wrong.
func (d *Driver) Leave(deadline time.Duration) error {
	return d.leave(deadline)
}

// AwaitAlarm waits for the alarm's goroutine, if it ran, to end, which it does once Close begins.
func (d *Driver) AwaitAlarm() {
	d.alarm.wait()
}

// AwaitClients waits for every client that closes in the background, and for the released markers
// that wait for the barrier, then stops forwarding librdkafka's logs.
func (d *Driver) AwaitClients() {
	d.closers.Wait()
}

// CloseLogs stops forwarding librdkafka's logs, once no client is left to log.
func (d *Driver) CloseLogs() {
	d.logs.Close()
}
