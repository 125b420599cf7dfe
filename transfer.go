package goneli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ErrNotLeader is wrapped by a TransferError when the instance asked to hand over does not lead.
var ErrNotLeader = driver.ErrNotLeader

// ErrNotMember is wrapped by a TransferError when the member to hand over to is not in the group.
var ErrNotMember = driver.ErrNotMember

// ErrRolesTransfer is wrapped by a TransferError for an instance of several roles: a role cannot be
// handed to a member of one's choosing (see the package doc, Transfers).
var ErrRolesTransfer = driver.ErrRolesTransfer

// TransferError says why a transfer of leadership was refused.
type TransferError struct {
	To     string // the member asked for
	Reason string
	// Members names the group's members, for a target that is not one of them.
	Members []string
	Err     error // ErrNotLeader, ErrNotMember, ErrRolesTransfer, or nil
}

func (e *TransferError) Error() string {
	msg := fmt.Sprintf("goneli: cannot transfer leadership to %q: %s", e.To, e.Reason)
	if len(e.Members) > 0 {
		msg += fmt.Sprintf(" (members besides the leader: %s)", strings.Join(e.Members, ", "))
	}
	return msg
}

// Unwrap returns the sentinel error, if any.
func (e *TransferError) Unwrap() error { return e.Err }

// TransferTo is Curator.TransferTo.
func (n *neli) TransferTo(name string) error {
	return n.d.TransferTo(n.parts[0].Role, name, n.events.inCall())
}

// TransferResult is what Transfer did.
type TransferResult struct {
	Role      string
	Partition int32
	// From is the leader when Transfer began, To the member that leads now (the one asked for).
	From, To string
	// Took is from writing the request to the first heartbeat of To's tenure that Transfer read;
	// zero if To led already.
	Took time.Duration
}

// Transfer asks the leader of role (empty for New's single leader) in config's group to hand over
// to the member called to, without joining the group, and waits until that member leads or ctx
// ends. config needs what Describe needs, and HeartbeatTimeout should be the group's own: it sets
// the settle time. Transfer refuses, with a *TransferError, a member that is not in the group
// (ErrNotMember), one that another member outranks, a role that has no leader, a leader that has
// led for less than the settle time, and a group of several roles (ErrRolesTransfer). It writes one
// record to the role's partition of the leader topic, so it needs Write on that topic.
func Transfer(ctx context.Context, config Config, role, to string) (TransferResult, error) {
	res := TransferResult{Role: role, To: Sanitise(to)}
	st, err := Describe(ctx, config)
	if err != nil {
		return res, err
	}
	config, timing, err := config.prepare()
	if err != nil {
		return res, err
	}
	if len(st.Roles) > 1 {
		return res, &TransferError{To: to, Reason: fmt.Sprintf("group %s has %d roles", st.Group, len(st.Roles)), Err: ErrRolesTransfer}
	}
	if len(st.Roles) == 0 || (role != "" && st.Roles[0].Role != role) {
		return res, &TransferError{To: to, Reason: fmt.Sprintf("group %s has no role %q", st.Group, role)}
	}
	rs := st.Roles[0]
	res.Partition, res.From = rs.Partition, rs.Leader.Name
	if rs.Leader.Name == "" {
		return res, &TransferError{To: to, Reason: "nobody leads the role now", Err: ErrNotLeader}
	}
	if rs.Leader.Name == res.To {
		return res, nil
	}
	members := make([]driver.Member, len(st.Members))
	for i, m := range st.Members {
		members[i] = driver.Member{MemberID: m.MemberID, ClientID: m.ClientID, Name: m.Name, Priority: m.Priority}
	}
	if err := driver.PlanTransfer(shellErrors{config}, members, rs.Leader.Name, to, *config.HeartbeatTimeout, timing.Heartbeat()); err != nil {
		return res, err
	}
	settle := driver.PrioritySettle(*config.HeartbeatTimeout)
	if led := st.At.Sub(rs.Leader.Since); led < settle {
		return res, &TransferError{To: to, Reason: fmt.Sprintf("%s has led for %v, and a role changes hands at most once per settle time (%v); try again in %v",
			rs.Leader.Name, led.Round(time.Millisecond), settle, (settle - led).Round(time.Millisecond))}
	}
	sent := time.Now()
	if err := writeTransferRequest(ctx, config, timing, rs, res.To); err != nil {
		return res, err
	}
	leads := make(chan time.Time, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Watch(wctx, config, func(info LeaderInfo) {
			if info.Partition == rs.Partition && info.Name == res.To && info.Token > rs.Leader.Token {
				select {
				case leads <- time.Now():
				default:
				}
			}
		})
	}()
	select {
	case at := <-leads:
		cancel()
		<-done
		res.Took = at.Sub(sent)
		return res, nil
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = ctx.Err()
		}
		return res, fmt.Errorf("goneli: asked %s to hand over to %s, who does not lead yet (%w); the leader logs why it refused, if it did",
			res.From, res.To, err)
	}
}

// writeTransferRequest produces a transfer request for rs's partition and waits for the broker to
// have it.
func writeTransferRequest(ctx context.Context, config Config, timing core.GroupTiming, rs RoleStatus, to string) error {
	_, producerConf, _ := config.clientConfigs(timing)
	producerConf["client.id"] = fmt.Sprint(producerConf["client.id"]) + "-transfer"
	producerConf["log_level"] = 0
	p, err := config.KafkaProducerProvider(fromKafkaConfigMap(producerConf))
	if err != nil {
		return fmt.Errorf("goneli: cannot create a producer for the transfer request: %w", err)
	}
	defer p.Close()
	now := time.Now()
	h := core.Heartbeat{Tenure: core.RandomTenure(), Seq: 1, SentWall: now.UnixNano(), Kind: core.KindTransfer, Role: rs.Role, To: to}
	reports := make(chan kafka.Event, 1)
	topic := config.LeaderTopic
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: rs.Partition},
		Key: []byte(config.Name), Value: h.AppendTo(nil)}, reports); err != nil {
		return fmt.Errorf("goneli: cannot write the transfer request to %s: %w", topic, err)
	}
	select {
	case ev := <-reports:
		if m, ok := ev.(*kafka.Message); ok && m.TopicPartition.Error != nil {
			if err := authorizationError(config, "producer", m.TopicPartition.Error); err != nil {
				return err
			}
			return fmt.Errorf("goneli: cannot write the transfer request to %s: %w", topic, m.TopicPartition.Error)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("goneli: the transfer request to %s was not acknowledged: %w", topic, ctx.Err())
	}
}
