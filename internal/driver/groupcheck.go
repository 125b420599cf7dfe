package driver

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
)

// The group coordinator checks an offset commit against the member id and generation only, not
// against the partitions the member owns. Members of one group that subscribe to different leader
// topics (a rolling deploy that changes LeaderTopic, two services sharing a group id) are each
// assigned partition 0 of their own topic, and each one's heartbeat commits pass: two leaders at
// once. So before an instance first leads in a membership of the group, it describes the group and
// refuses to lead while any member holds a partition of another topic ("How often the group is
// described", below, gives the argument). The lease (internal/core, lease.go) decides what a check's result means;
// this file only asks and reads.

// GroupDescriber is the part of *kafka.AdminClient that the check needs.
type GroupDescriber interface {
	DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error)
}

// describedOf reads librdkafka's description of a group for judgeGroup: each member's current
// assignment and, under KIP-848, its target assignment too.
func describedOf(d kafka.ConsumerGroupDescription) core.GroupDesc {
	out := core.GroupDesc{Group: d.GroupID}
	for _, m := range d.Members {
		gm := core.GroupMember{ClientID: m.ClientID, MemberID: m.ConsumerID, Host: m.Host}
		parts := m.Assignment.TopicPartitions
		if m.TargetAssignment != nil {
			parts = append(append([]kafka.TopicPartition(nil), parts...), m.TargetAssignment.TopicPartitions...)
		}
		for _, tp := range parts {
			name := ""
			if tp.Topic != nil {
				name = *tp.Topic
			}
			gm.Parts = append(gm.Parts, core.TopicPart{Topic: name, Partition: tp.Partition})
		}
		out.Members = append(out.Members, gm)
	}
	return out
}

// viaSide reports whether the group check goes over goneli's own connection (internal/sidechan),
// which librdkafka's admin client cannot abort the process on: it is there and has not given way
// to librdkafka (sidefail.go).
func (d *Driver) viaSide() bool {
	return d.sideUsable()
}

// SideFirst describes the group over goneli's own connection, and through librdkafka's admin
// client where there is none or it has given way to librdkafka: at once, in the same description,
// when it gives way during it.
type SideFirst struct {
	Side  sidechan.Channel // nil where goneli's own connection cannot follow the settings
	Admin GroupDescriber
}

func (s SideFirst) DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	if s.Side != nil && s.Side.Fallback() == nil {
		res, err := s.Side.DescribeConsumerGroups(ctx, groups, options...)
		if !sidechan.IsFallback(err) {
			return res, err
		}
	}
	return s.Admin.DescribeConsumerGroups(ctx, groups, options...)
}

// viaLibrdkafka is what New logs, and the doctor reports, when goneli's own connection cannot
// follow the clients' settings (why names the setting) or has given way to librdkafka.
func ViaLibrdkafka(why error) string {
	return fmt.Sprintf("%v; the group check, Describe and the batched heartbeats go through librdkafka, whose admin client "+
		"(2.11.1) can abort the process on a group description while brokers restart (confluentinc/librdkafka#4605)", why)
}

// DescribeGroup asks the coordinator for the group, waiting at most timeout.
func DescribeGroup(ctx context.Context, d GroupDescriber, group string, timeout time.Duration) (kafka.ConsumerGroupDescription, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	res, err := d.DescribeConsumerGroups(ctx, []string{group}, kafka.SetAdminRequestTimeout(timeout))
	if err != nil {
		return kafka.ConsumerGroupDescription{}, err
	}
	if len(res.ConsumerGroupDescriptions) != 1 {
		return kafka.ConsumerGroupDescription{}, fmt.Errorf("asked for one group, got %d", len(res.ConsumerGroupDescriptions))
	}
	desc := res.ConsumerGroupDescriptions[0]
	if desc.Error.Code() != kafka.ErrNoError {
		return desc, desc.Error
	}
	return desc, nil
}

// describedGroup is a description of the group, or why there is none, and under KIP-848 the
// session timing that the broker applies to the group, read beside it (nil under the classic
// protocol).
type describedGroup struct {
	desc   kafka.ConsumerGroupDescription
	err    error
	timing *ConsumerGroupTiming
}

// groupChecker describes the group on a goroutine of its own, one description at a time: a
// description can take up to a HeartbeatTimeout, which the pulsing goroutine cannot wait for.
// Its methods other than stop are called with the driver's lock held.
type groupChecker struct {
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
	done    chan describedGroup
	serving map[int32]uint64 // the tenures, by partition, that the description under way serves
}

func newGroupChecker() *groupChecker {
	c := &groupChecker{done: make(chan describedGroup, 1)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// busy reports whether a description is under way or waits to be collected.
func (c *groupChecker) busy() bool {
	return c.serving != nil
}

// start describes group through d on behalf of tenures, and calls release when done with d. If
// timing is set, it reads the group's KIP-848 session timing too (checkSessionAgain), at the same
// time as the description rather than after it.
func (c *groupChecker) start(d GroupDescriber, release func(), group string, timeout time.Duration, tenures map[int32]uint64,
	timing func(context.Context) ConsumerGroupTiming) {
	c.serving = tenures
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		defer release()
		var t ConsumerGroupTiming
		var read sync.WaitGroup
		if timing != nil {
			read.Go(func() { t = timing(c.ctx) })
		}
		desc, err := DescribeGroup(c.ctx, d, group, timeout)
		read.Wait()
		res := describedGroup{desc: desc, err: err}
		if err == nil && timing != nil {
			res.timing = &t
		}
		c.done <- res
	}()
}

// result returns the finished description, if there is one, with the tenures it serves.
func (c *groupChecker) result() (describedGroup, map[int32]uint64, bool) {
	select {
	case res := <-c.done:
		tenures := c.serving
		c.serving = nil
		return res, tenures, true
	default:
		return describedGroup{}, nil, false
	}
}

// stop cancels a description under way and waits for its goroutine.
func (c *groupChecker) stop() {
	c.cancel()
	c.running.Wait()
}

// # How often the group is described
//
// Through librdkafka, a description of the group is a coordinator-bound admin request, and
// librdkafka 2.11.1 aborts the whole process when the coordinator's connection drops while one is
// being sent (confluentinc/librdkafka#4605): a rolling restart of the brokers could take the
// service down with it. goneli's own connection (internal/sidechan) avoids that where it can follow
// the clients' settings; for the rest, and to spare the coordinator, the group is described only as often
// as safety needs, and not while a connection was just seen to fail.
//
// Safety needs one passed check per membership, not one per tenure. Say members X and Y of one
// group use different leader topics (or role lists) and both lead. Each passed a check made while
// it held the partition it leads, under the membership it still has (a member expelled from the
// group, or that left it, comes back under a new member id and is checked again), and each held a
// partition of its topic in every generation since its check (one that went a generation without
// any is checked again, as it might have been invisible to a check made then). Say Y's check came
// later. X was a member all along and held a partition of its topic at the generation Y's check
// described, which was no older than Y's own assignment (the check sees Y holding its partition),
// so that check showed X: Y would not lead. A role list is visible even without a partition, in
// the client.id. New also checks, before joining, so that a misconfigured instance is usually
// refused at once; that check proves nothing about later generations.
//
// With roles, one description serves every tenure that asked before it began, so a rebalance that
// assigns several roles costs one; and a membership that passed costs none at all.

// memberID reads the member id that the group coordinator gave c, or "" if it cannot. librdkafka
// keeps it only in the consumer's group metadata, which confluent-kafka-go hands out serialized
// (for transactions): "CGMDv2:", the generation (int32, host order), the group id and the member
// id, each ending in a NUL. Anything else reads as unknown, which costs a group check per tenure
// but is never taken for a membership that passed.
func memberID(c *kafka.Consumer, group string) string {
	md, err := c.GetConsumerGroupMetadata()
	if err != nil || md == nil {
		return ""
	}
	f := reflect.ValueOf(md).Elem().FieldByName("serialized")
	if !f.IsValid() || f.Kind() != reflect.Slice || f.Type().Elem().Kind() != reflect.Uint8 {
		return ""
	}
	return parseMemberID(f.Bytes(), group)
}

// parseMemberID reads the member id from serialized consumer group metadata (see memberID).
func parseMemberID(b []byte, group string) string {
	const magic = "CGMDv2:"
	if !bytes.HasPrefix(b, []byte(magic)) || len(b) < len(magic)+4 {
		return ""
	}
	rest := b[len(magic)+4:]
	g, rest, ok := bytes.Cut(rest, []byte{0})
	if !ok || string(g) != group {
		return ""
	}
	id, _, ok := bytes.Cut(rest, []byte{0})
	if !ok {
		return ""
	}
	return string(id)
}
