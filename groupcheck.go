package goneli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
)

// The group coordinator checks an offset commit against the member id and generation only, not
// against the partitions the member owns. Members of one group that subscribe to different leader
// topics (a rolling deploy that changes LeaderTopic, two services sharing a group id) are each
// assigned partition 0 of their own topic, and each one's heartbeat commits pass: two leaders at
// once. So before an instance first leads in a membership of the group, it describes the group and
// refuses to lead while any member holds a partition of another topic ("How often the group is
// described", below, gives the argument). The lease (lease.go) decides what a check's result means;
// this file only asks and reads.

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

// judgeGroup reads a group description for a tenure of partition, assigned under member id member
// (if known: a predecessor of the same client.id may still be in the group, and it must not pass
// for this instance).
//
// A partition the description gives no topic name for cannot be judged. Apache Kafka names every
// topic it describes, but kfake, under KIP-848, gives topic IDs only: goneli's own connection maps
// them to names from the cluster's metadata where it can (internal/sidechan), and confluent-kafka-go
// passes on no topic IDs at all, so a partition may still come without one. Such a partition counts
// as the instance's own topic only when it belongs to this instance's own member, whose consumer
// subscribes to that one topic, and that member is known for certain: by its member id, or as the
// only one with this client.id. Any other member's nameless partition makes the verdict a conflict
// (Unnamed), so that the tenure does not lead: counting it as the own topic is what let a member on
// another topic lead beside this one.
func judgeGroup(d kafka.ConsumerGroupDescription, topic, clientID, member string, partition int32) groupVerdict {
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
		self := m.ClientID == clientID && (member == "" || m.ConsumerID == member)
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
			case name == "" && !(self && (member != "" || selves == 1)):
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
// says which partition each role is. Each name is hashed after its length, so that no two lists
// hash the same bytes: with a separator instead, a name containing it could shift a boundary, and
// two lists that name one role for different partitions would pass each other's group check.
func rolesDigest(roles []string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, r := range roles {
		_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(r)))])
		_, _ = h.Write([]byte(r))
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

// viaSide reports whether the group check goes over goneli's own connection (internal/sidechan),
// which librdkafka's admin client cannot abort the process on: it is there and has not given way
// to librdkafka (sidefail.go).
func (d *driver) viaSide() bool {
	return d.sideUsable()
}

// sideFirst describes the group over goneli's own connection, and through librdkafka's admin
// client where there is none or it has given way to librdkafka: at once, in the same description,
// when it gives way during it.
type sideFirst struct {
	side  sidechan.Channel // nil where goneli's own connection cannot follow the settings
	admin groupDescriber
}

func (s sideFirst) DescribeConsumerGroups(ctx context.Context, groups []string, options ...kafka.DescribeConsumerGroupsAdminOption) (kafka.DescribeConsumerGroupsResult, error) {
	if s.side != nil && s.side.Fallback() == nil {
		res, err := s.side.DescribeConsumerGroups(ctx, groups, options...)
		if !sidechan.IsFallback(err) {
			return res, err
		}
	}
	return s.admin.DescribeConsumerGroups(ctx, groups, options...)
}

// viaLibrdkafka is what New logs, and the doctor reports, when goneli's own connection cannot
// follow the clients' settings (why names the setting) or has given way to librdkafka.
func viaLibrdkafka(why error) string {
	return fmt.Sprintf("%v; the group check, Describe and the batched heartbeats go through librdkafka, whose admin client "+
		"(2.11.1) can abort the process on a group description while brokers restart (confluentinc/librdkafka#4605)", why)
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

// describedGroup is a description of the group, or why there is none, and under KIP-848 the
// session timing that the broker applies to the group, read beside it (nil under the classic
// protocol).
type describedGroup struct {
	desc   kafka.ConsumerGroupDescription
	err    error
	timing *consumerGroupTiming
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
func (c *groupChecker) start(d groupDescriber, release func(), group string, timeout time.Duration, tenures map[int32]uint64,
	timing func(context.Context) consumerGroupTiming) {
	c.serving = tenures
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		defer release()
		var t consumerGroupTiming
		var read sync.WaitGroup
		if timing != nil {
			read.Go(func() { t = timing(c.ctx) })
		}
		desc, err := describeGroup(c.ctx, d, group, timeout)
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

// membership says whether this instance's current membership of the group has passed a group
// check and has held a partition of the leader topic in every generation since. It does no I/O.
type membership struct {
	member  string // the member id the group gave this instance; empty while unknown
	vouched bool
}

// assigned records a rebalance that gave this instance partitions (holds says whether it now holds
// any partition of the leader topic), under member id member ("" if it cannot be read).
func (m *membership) assigned(member string, holds bool) {
	if member == "" || member != m.member || !holds {
		m.vouched = false
	}
	m.member = member
}

// revoked records a rebalance that took partitions away. A lost assignment means the group moved
// on without this member; an incremental revocation that leaves nothing means a generation
// without a partition. An eager revocation of everything is followed, in the same rebalance, by
// the next generation's assignment, which assigned judges.
func (m *membership) revoked(lost, cooperative, holds bool) {
	if lost || (cooperative && !holds) {
		m.vouched = false
	}
}

// left records that this instance left the group (a yield, or Close): it rejoins as a new member.
func (m *membership) left() {
	m.vouched, m.member = false, ""
}

// passed records a check that cleared a tenure which began under member id member.
func (m *membership) passed(member string) {
	if member != "" && member == m.member {
		m.vouched = true
	}
}

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

// backOffInconclusive spaces the checks that cannot see this instance's assignment. The lease asks
// again inconclusiveCheckRetry after each, which under the classic protocol, whose coordinator
// describes no assignment while the group rebalances (GroupMetadataManager.describeGroups gives
// members without metadata outside Stable), made about fifty descriptions a second per waiting
// instance for as long as a rebalance lasted. The members rejoin at their next group heartbeats, so
// looking more often than once a group heartbeat interval learns nothing sooner: the pause doubles
// from inconclusiveCheckRetry up to that interval (and a tenth of the lease), which is all it can
// delay a tenure by. A conclusive check, or a failed one, which the lease spaces itself, ends it.
func (d *driver) backOffInconclusive(inconclusive bool) {
	if !inconclusive {
		d.check.inconclusive, d.check.retryAt = 0, 0
		return
	}
	limit := min(d.timing.heartbeat(), *d.config.HeartbeatTimeout/10)
	pause := min(inconclusiveCheckRetry<<min(d.check.inconclusive, 16), limit)
	d.check.inconclusive++
	d.check.retryAt = d.now() + pause
}

// checkQuiet is how long after a client last saw a broker connection fail the group is not
// described (see "How often the group is described"): long enough for librdkafka to have
// reconnected or to have seen the rest of a restart, short next to a lease.
const checkQuiet = time.Second

// checkQuietMax bounds how long a check waits for checkQuiet: connections that fail over and over
// (a broker gone for good, say) must not keep the group from ever being checked.
const checkQuietMax = 10 * time.Second
