package goneli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The group coordinator checks an offset commit against the member id and generation only, not
// against the partitions the member owns. Members of one group that subscribe to different leader
// topics (a rolling deploy that changes LeaderTopic, two services sharing a group id) are each
// assigned partition 0 of their own topic, and each one's heartbeat commits pass: two leaders at
// once. So before a tenure first leads, its instance describes the group and refuses to lead while
// any member holds a partition of another topic. A member that leads holds partition 0 of its own
// topic in every generation it belongs to, and the coordinator keeps it in the group for as long as
// its lease can run, so whichever of two such members is assigned later sees the other and holds
// back. New makes the same check, so that a misconfigured instance is usually refused at once.
// The lease (lease.go) decides what a check's result means; this file only asks and reads.

// groupDescriber is the part of *kafka.AdminClient that the check needs.
type groupDescriber interface {
	DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error)
}

// groupVerdict is what a description of the group says about this instance's tenure.
type groupVerdict struct {
	conflict *GroupConflictError
	// sawSelf is set when the description shows this instance holding the tenure's partition of
	// its topic, which proves that it reflects a generation no older than the tenure's
	// assignment. kfake, for one, shows no assignments while a group rebalances.
	sawSelf bool
}

// judgeGroup reads a group description for a tenure of partition.
//
// A partition the description gives no topic name for cannot be judged. Apache Kafka names every
// topic it describes, but kfake, under KIP-848, gives topic IDs only, and confluent-kafka-go passes
// on no topic IDs, so nothing here can map them to names. Such a partition counts as the
// instance's own topic only when it belongs to this instance's own member, whose consumer
// subscribes to that one topic, and that member is known for certain: the only one with this
// client.id. Any other member's nameless partition makes the verdict a conflict (Unnamed), so that
// the tenure does not lead: counting it as the own topic is what let a member on another topic
// lead beside this one.
func judgeGroup(d kafka.ConsumerGroupDescription, topic, clientID string, partition int32) groupVerdict {
	var v groupVerdict
	selves := 0
	for _, m := range d.Members {
		if m.ClientID == clientID {
			selves++
		}
	}
	for _, m := range d.Members {
		parts := m.Assignment.TopicPartitions
		if m.TargetAssignment != nil {
			parts = append(append([]kafka.TopicPartition(nil), parts...), m.TargetAssignment.TopicPartitions...)
		}
		self := m.ClientID == clientID
		var foreign []string
		var unnamed []int32
		for _, tp := range parts {
			name := ""
			if tp.Topic != nil {
				name = *tp.Topic
			}
			switch {
			case name != "" && name != topic:
				if !slices.Contains(foreign, name) {
					foreign = append(foreign, name)
				}
			case name == "" && !(self && selves == 1):
				if !slices.Contains(unnamed, tp.Partition) {
					unnamed = append(unnamed, tp.Partition)
				}
			case self && tp.Partition == partition:
				v.sawSelf = true
			}
		}
		otherRoles := rolesDigestOf(m.ClientID) != rolesDigestOf(clientID)
		if len(foreign) > 0 || len(unnamed) > 0 || otherRoles {
			if v.conflict == nil {
				v.conflict = &GroupConflictError{Group: d.GroupID, Topic: topic, Roles: rolesDigestOf(clientID)}
			}
			sort.Strings(foreign)
			slices.Sort(unnamed)
			fm := ForeignMember{ClientID: m.ClientID, Host: m.Host, Topics: foreign, Unnamed: unnamed}
			if otherRoles {
				fm.Roles = rolesDigestOf(m.ClientID)
				if fm.Roles == "" {
					fm.Roles = singleRole
				}
			}
			v.conflict.Members = append(v.conflict.Members, fm)
		}
	}
	return v
}

// Members of one group must agree on which role each partition stands for: two instances whose
// role lists differ would each lead "billing" on a partition of its own. Every instance made by
// NewRoles therefore ends its consumer's client.id with rolesSuffix and a digest of its role list,
// which the group's description shows for every member, and the group check treats a member with
// another digest (or none, for New's single role) like a member on another topic: whichever is
// assigned later sees the other and does not lead.
const rolesSuffix = "--roles-"

// singleRole stands for New's single unnamed role in a GroupConflictError.
const singleRole = "(single leader)"

// rolesDigest names a role list: eight hex digits of its SHA-256, order included, since the order
// says which partition each role is.
func rolesDigest(roles []string) string {
	h := sha256.New()
	for _, r := range roles {
		_, _ = h.Write([]byte(r))
		_, _ = h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// rolesDigestOf reads the digest from a member's client.id; empty for a member without one.
func rolesDigestOf(clientID string) string {
	i := strings.LastIndex(clientID, rolesSuffix)
	if i < 0 {
		return ""
	}
	return clientID[i+len(rolesSuffix):]
}

// describeGroup asks the coordinator for the group, waiting at most timeout.
func describeGroup(ctx context.Context, d groupDescriber, group string, timeout time.Duration) (kafka.ConsumerGroupDescription, error) {
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

// groupCheck is the result of one check of the group for one tenure.
type groupCheck struct {
	verdict groupVerdict
	err     error
}

// describedGroup is a description of the group, or why there is none.
type describedGroup struct {
	desc kafka.ConsumerGroupDescription
	err  error
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

// start describes group through d on behalf of tenures, and calls release when done with d.
func (c *groupChecker) start(d groupDescriber, release func(), group string, timeout time.Duration, tenures map[int32]uint64) {
	c.serving = tenures
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		defer release()
		desc, err := describeGroup(c.ctx, d, group, timeout)
		c.done <- describedGroup{desc: desc, err: err}
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
