package goneli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/goneli/goneli/internal/core"

	"github.com/obsidiandynamics/libstdgo/concurrent"
)

// Roles contends for several leaderships at once with one consumer and one producer: role i is
// partition i of the leader topic, and whoever the group assigns partition i leads role i. The
// group's cooperative-sticky assignment spreads the roles over the members, floor(N/M) or
// ceil(N/M) each for N roles and M members, and moves only the roles it must when members come
// and go. Every role has its own tenure, lease, heartbeats, fencing token and events; everything
// the package doc says of the single leader holds for each role on its own.
//
// What the roles share is the traffic: their leases renew on the same ticks, so the heartbeats of
// every role led go out together once per RenewInterval, in one ProduceRequest per broker (over a
// connection of goneli's own, as librdkafka puts one partition in a request), come back in the
// consumer's fetches and are committed by one OffsetCommit. An instance leading many roles costs
// the brokers about what one leading a single role does; each role's lease still rests on its own
// heartbeat, read back from its own partition, and that heartbeat's own accepted offset.
//
// Pulse, Close, Yield and the lifecycle are shared by all roles, as they share the group
// membership; a role is given up on its own only by the group moving it.
type Roles interface {
	// Role returns the named role, or nil if this instance does not contend for it.
	Role(name string) Role

	// All returns every role, in partition order.
	All() []Role

	// Leading returns the names of the roles led now, in partition order.
	Leading() []string

	// Pulse is Neli.Pulse for all roles: it returns true at once while this instance leads at
	// least one role, and otherwise pulses until it does or timeout passes.
	Pulse(timeout time.Duration) (bool, error)

	// PulseCtx is Neli.PulseCtx for all roles.
	PulseCtx(ctx context.Context) (bool, error)

	// Deadline is the throttle that keeps the consumer from being polled more often than
	// Config.MinPollInterval.
	Deadline() concurrent.Deadline

	// Background starts a goroutine that pulses continually and, for each role led, a goroutine
	// that runs task with the role's name over and over while it leads. See Pulser and LeaderTask;
	// a slow run of one role's task holds up no other role.
	Background(task RoleTask) (Pulser, error)

	// Yield gives up every role for d; see Curator.Yield.
	Yield(d time.Duration) error

	// TransferTo hands the leadership of role over to the member called name; see
	// Curator.TransferTo. Only an instance of a single role can: with several, a role is given
	// up only by leaving the group with all of them, and the group's assignor would not keep the
	// role with the member chosen (ErrRolesTransfer; the package doc, Transfers, says why).
	// Config.Priority places roles.
	TransferTo(role, name string) error

	// Close gives up every role and leaves the group; see Neli.Close.
	Close() error

	// Await blocks until the instance is Closed, the barrier has returned from its last events and
	// every Kafka client has finished closing, or the close bound (see Neli.Close) has passed.
	Await()

	// State reports the lifecycle stage.
	State() State
}

// Role is one role of a Roles instance.
type Role interface {
	// Name is the role's name, as given to NewRoles.
	Name() string
	// Partition is the role's partition of the leader topic.
	Partition() int32
	// IsLeader reports whether this instance holds a valid lease on the role now; see
	// Neli.IsLeader.
	IsLeader() bool
	// Token returns the fencing token of the role's current tenure while this instance leads it,
	// and 0 otherwise. Tokens strictly increase per role; see Curator.Token.
	Token() int64
	// Leader returns the role's last known leader; see Curator.Leader.
	Leader() (LeaderInfo, bool)
	// Stats returns the role's counters and timings; see Curator.Stats.
	Stats() Stats
}

// RoleTask is leader work for one role, run over and over while the role is led; see LeaderTask.
type RoleTask func(role string)

// NewRoles validates config and roles, makes sure the leader topic has a partition for every role
// (creating it with that many, or adding partitions to a topic that has too few), checks that no
// member of the group uses another leader topic or another role list, and joins the group. It does
// not wait for leadership; call Pulse or Background for that.
//
// roles are the roles' names, at least one, each non-empty, at most 255 bytes, free of control
// characters and listed once;
// their order gives the partitions, so every contender of a group must list the same roles in the
// same order: an instance that sees a member with another list does not lead until it has gone,
// and NewRoles fails with a *GroupConflictError if one is in the group already (see
// GroupConflictError). Use Shards for numbered roles. Events name their role in their Role field.
func NewRoles(config Config, roles []string, barrier ...Barrier) (Roles, error) {
	if err := validateRoles(roles); err != nil {
		return nil, err
	}
	n, err := newInstance(config, roles, core.RolesDigest(roles), barrier)
	if err != nil {
		return nil, err
	}
	return &roleSet{n: n}, nil
}

// Shards returns the names of n numbered roles, "0" to "n-1", for NewRoles.
func Shards(n int) []string {
	out := make([]string, max(n, 0))
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// MaxRoles is the most roles NewRoles accepts. Each role is a partition of the leader topic, and
// an instance that leads many reads a heartbeat of each back every MinPollInterval, which one poll
// cycle serves up to this many of.
const MaxRoles = core.MaxEventsPerCycle

func validateRoles(roles []string) error {
	if len(roles) == 0 {
		return &ConfigError{Field: "roles", Reason: "need at least one role"}
	}
	if len(roles) > MaxRoles {
		return &ConfigError{Field: "roles", Value: len(roles), Reason: fmt.Sprintf("at most %d roles, one partition each", MaxRoles)}
	}
	var errs []error
	seen := map[string]bool{}
	for i, r := range roles {
		switch {
		case r == "":
			errs = append(errs, &ConfigError{Field: fmt.Sprintf("roles[%d]", i), Reason: "must not be empty"})
		case len(r) > core.MaxRoleName:
			errs = append(errs, &ConfigError{Field: fmt.Sprintf("roles[%d]", i), Value: r[:16] + "...", Reason: fmt.Sprintf("at most %d bytes", core.MaxRoleName)})
		case strings.IndexFunc(r, unicode.IsControl) >= 0:
			// A name is printed in logs, events and `neli run`'s NELI_ROLE, where a control
			// character would garble or forge lines; and a NUL once let two role lists share a digest.
			errs = append(errs, &ConfigError{Field: fmt.Sprintf("roles[%d]", i), Value: r,
				Reason: "must not contain control characters (U+0000-U+001F, U+007F-U+009F); any other character is allowed"})
		case seen[r]:
			errs = append(errs, &ConfigError{Field: fmt.Sprintf("roles[%d]", i), Value: r, Reason: "listed twice"})
		}
		seen[r] = true
	}
	return errors.Join(errs...)
}

// roleSet is the Roles view of an instance.
type roleSet struct {
	n *neli
}

// roleOf is the Role view of one part.
type roleOf struct {
	n *neli
	p *part
}

func (r *roleSet) Role(name string) Role {
	for _, p := range r.n.parts {
		if p.Name == name {
			return roleOf{r.n, p}
		}
	}
	return nil
}

func (r *roleSet) All() []Role {
	out := make([]Role, len(r.n.parts))
	for i, p := range r.n.parts {
		out[i] = roleOf{r.n, p}
	}
	return out
}

func (r *roleSet) Leading() []string {
	var out []string
	for _, p := range r.n.parts {
		if r.n.isLeaderOf(p) {
			out = append(out, p.Name)
		}
	}
	return out
}

func (r *roleSet) Pulse(timeout time.Duration) (bool, error)  { return r.n.Pulse(timeout) }
func (r *roleSet) PulseCtx(ctx context.Context) (bool, error) { return r.n.PulseCtx(ctx) }
func (r *roleSet) Deadline() concurrent.Deadline              { return r.n.Deadline() }
func (r *roleSet) Yield(d time.Duration) error                { return r.n.Yield(d) }
func (r *roleSet) Close() error                               { return r.n.Close() }
func (r *roleSet) Await()                                     { r.n.Await() }
func (r *roleSet) State() State                               { return r.n.State() }

func (r *roleSet) TransferTo(role, name string) error {
	for _, p := range r.n.parts {
		if p.Name == role {
			return r.n.d.TransferTo(p.Role, name, r.n.events.inCall())
		}
	}
	return &TransferError{To: name, Reason: fmt.Sprintf("this instance does not contend for role %q", role)}
}

func (r *roleSet) Background(task RoleTask) (Pulser, error) {
	p, ctx, err := newPulser(r.n.State(), task == nil, "RoleTask")
	if err != nil {
		return nil, err
	}
	tasks := make(chan struct{})
	for _, part := range r.n.parts {
		go func() {
			defer func() { tasks <- struct{}{} }()
			runRole(ctx, r.n, part, task)
		}()
	}
	go func() {
		// The pulser is done once the pulsing and every role's runs have stopped.
		defer close(p.done)
		defer func() {
			p.cancel()
			for range r.n.parts {
				<-tasks
			}
		}()
		p.err = pulseUntil(ctx, r.n)
	}()
	return p, nil
}

// pulseUntil pulses n at its poll interval until ctx ends or n closes, and returns a fatal error
// if Pulse had one. Unlike Neli's Background it never runs leader work itself, so a leader does
// not spin on a Pulse that returns at once.
func pulseUntil(ctx context.Context, n *neli) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil && n.State() == Live {
		if err := n.pulseOnce(-1); err != nil {
			return err
		}
		timer.Reset(n.cycleWait())
		select {
		case <-ctx.Done():
		case <-n.life.closing:
		case <-timer.C:
		}
	}
	return nil
}

// runRole runs task for p's role whenever it is led, until ctx ends.
func runRole(ctx context.Context, n *neli, p *part, task RoleTask) {
	for ctx.Err() == nil {
		if !n.isLeaderOf(p) {
			select {
			case <-ctx.Done():
			case <-p.signal:
			}
			continue
		}
		start := taskNow()
		task(p.Name)
		if rest := MinTaskInterval - taskNow().Sub(start); rest > 0 {
			taskPause(ctx, rest)
		}
	}
}

func (r roleOf) Name() string               { return r.p.Name }
func (r roleOf) Partition() int32           { return r.p.ID }
func (r roleOf) IsLeader() bool             { return r.n.isLeaderOf(r.p) }
func (r roleOf) Token() int64               { return r.n.tokenOf(r.p) }
func (r roleOf) Leader() (LeaderInfo, bool) { return r.n.leaderOf(r.p) }
func (r roleOf) Stats() Stats               { return r.n.statsOf(r.p) }
