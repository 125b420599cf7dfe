package goneli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/sidechan"
)

// GroupStatus is a group as Describe found it: its members as the group coordinator lists them,
// and each role's leader as the newest records on the leader topic show it.
type GroupStatus struct {
	Group string
	Topic string
	// At is when the description was taken, by this host's clock; ages are relative to it.
	At time.Time
	// State is the coordinator's name for the group's state: Stable, PreparingRebalance,
	// CompletingRebalance or Empty.
	State string
	// Rebalancing is set while the group is between generations: a leader may be about to change.
	Rebalancing bool
	// Protocol is the group protocol: "classic", or "consumer" for KIP-848.
	Protocol string
	// Members are the group's members, sorted by client ID.
	Members []GroupMember
	// Roles has one entry per partition of the leader topic, in partition order; the single
	// leader of New is partition 0 with an empty Role. Empty when the topic does not exist.
	Roles []RoleStatus
}

// GroupMember is one member of the group.
type GroupMember struct {
	// Name is the member's Config.Name as its client.id carries it: goneli-<Name> (after the
	// priority, if not 0), with characters outside [a-zA-Z0-9._-] replaced by underscores. Empty
	// for a client that is not goneli's.
	Name     string
	ClientID string
	Host     string
	MemberID string
	// Partitions are the partitions of the leader topic assigned to the member.
	Partitions []int32
	// Priority is the member's Config.Priority as its client.id carries it; 0 for a client.id
	// that goneli did not derive.
	Priority int
}

// RoleStatus is what the leader topic and the group say about one role.
type RoleStatus struct {
	// Role is the role's name as its newest record gives it; empty for the single leader of New and
	// while the partition has no records.
	Role      string
	Partition int32
	// Leader is the live leader, known by a heartbeat of a tenure that has acquired, sent less than
	// HeartbeatTimeout before At by the sender's wall clock (and no more than that after it, for a
	// clock that runs ahead). Its Name is empty when there is none.
	Leader LeaderInfo
	// Owner is the Name of the member the group assigned the partition to, empty if none. It may
	// differ from Leader.Name for a moment after a rebalance.
	Owner string
	// Newest is the newest record on the partition: a heartbeat, or a marker that its tenure
	// released the role. Its Name is empty when the partition has no records.
	Newest RecordStatus
}

// RecordStatus describes one record on the leader topic.
type RecordStatus struct {
	// Name is the sender's Config.Name.
	Name string
	// Kind is "heartbeat", "releasing" (revoked while its barrier was busy), "released" or
	// "transfer" (a request to hand over, from Transfer or `neli transfer`).
	Kind string
	// Sent is the send time by the sender's wall clock, and Age is At minus Sent.
	Sent time.Time
	Age  time.Duration
	// Token is the fencing token of the sender's tenure; 0 while the tenure has not yet acquired.
	Token  int64
	Tenure string
	Offset int64
}

// DescribeTimeout bounds Describe when its context has no earlier deadline.
const DescribeTimeout = 10 * time.Second

// ErrNoSuchGroup is wrapped by the error Describe returns for a group that the coordinator does
// not know: it has no members and no committed offsets (a misspelt group, or one whose offsets
// expired long after its last member left).
var ErrNoSuchGroup = errors.New("goneli: no such group")

// Describe reports config's group as an operator sees it, without joining it: the group's members
// from the group coordinator, and each role's leader from the newest record on its partition of the
// leader topic. config needs only KafkaConfig and LeaderGroupID (and LeaderTopic, if the group does
// not use the default); HeartbeatTimeout decides how old a heartbeat may be and still name a live
// leader, so it should be the group's own. Describe returns within ctx's deadline or
// DescribeTimeout, whichever comes first; an error wrapping ErrNoSuchGroup if the coordinator does
// not know the group, and an *AuthorizationError if the broker refuses what reading the leader
// topic needs (see docs/operations.md, "ACLs").
func Describe(ctx context.Context, config Config) (GroupStatus, error) {
	config, timing, err := config.prepare()
	if err != nil {
		return GroupStatus{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, DescribeTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	bound := max(time.Until(deadline), time.Millisecond)

	consumerConf, _, adminConf := config.clientConfigs(timing)
	logs := driver.StartLogForwarder(config.Scribe, config.Name, config.forwardsLogs())
	defer logs.Close()
	admin, err := config.KafkaAdminProvider(fromKafkaConfigMap(adminConf))
	if err != nil {
		return GroupStatus{}, fmt.Errorf("goneli: cannot create admin client: %w", err)
	}
	defer admin.Close()

	status := GroupStatus{Group: config.LeaderGroupID, Topic: config.LeaderTopic}
	var side sidechan.Channel
	var client *sidechan.Client
	if c, err := sidechan.New(adminConf, sidechan.Options{ConsumerProtocol: !timing.Classic, Limit: bound}); err == nil {
		defer c.Close()
		side, client = c, c
	}
	desc, err := driver.DescribeGroup(ctx, driver.SideFirst{Side: side, Admin: admin}, config.LeaderGroupID, bound)
	switch {
	case err != nil && desc.Error.Code() == kafka.ErrGroupIDNotFound:
		return status, fmt.Errorf("%w: %q (check --group, or LeaderGroupID)", ErrNoSuchGroup, config.LeaderGroupID)
	case err != nil && client != nil && client.AuthenticationFailed(err):
		// A broker may answer bad credentials by closing the connection (kfake does), which
		// alone would read as a bare EOF.
		s := client.Settings()
		return status, fmt.Errorf("goneli: cannot describe group %q: SASL %s authentication as %q failed (check sasl.username and sasl.password): %w",
			config.LeaderGroupID, s.Mechanism, s.User, err)
	case err != nil:
		return status, fmt.Errorf("goneli: cannot describe group %q: %w", config.LeaderGroupID, err)
	case desc.State == kafka.ConsumerGroupStateDead || desc.State == kafka.ConsumerGroupStateUnknown && len(desc.Members) == 0:
		return status, fmt.Errorf("%w: %q (check --group, or LeaderGroupID)", ErrNoSuchGroup, config.LeaderGroupID)
	}
	status.State = desc.State.String()
	status.Rebalancing = desc.State == kafka.ConsumerGroupStatePreparingRebalance || desc.State == kafka.ConsumerGroupStateCompletingRebalance
	status.Protocol = strings.ToLower(desc.Type.String())
	owners := map[int32]string{}
	for _, m := range desc.Members {
		name, priority, _ := driver.ParseClientID(m.ClientID)
		gm := GroupMember{Name: name, ClientID: m.ClientID, Host: m.Host, MemberID: m.ConsumerID, Priority: priority}
		for _, tp := range m.Assignment.TopicPartitions {
			if tp.Topic == nil || *tp.Topic == "" || *tp.Topic == config.LeaderTopic {
				gm.Partitions = append(gm.Partitions, tp.Partition)
				owners[tp.Partition] = gm.Name
			}
		}
		sort.Slice(gm.Partitions, func(i, j int) bool { return gm.Partitions[i] < gm.Partitions[j] })
		status.Members = append(status.Members, gm)
	}
	sort.Slice(status.Members, func(i, j int) bool { return status.Members[i].ClientID < status.Members[j].ClientID })

	// What the description of the group left of the bound.
	left := max(time.Until(deadline), time.Millisecond)
	md, err := admin.GetMetadata(&config.LeaderTopic, false, int(left.Milliseconds()))
	if err != nil {
		return status, fmt.Errorf("goneli: cannot read the metadata of %s: %w", config.LeaderTopic, err)
	}
	tm, ok := md.Topics[config.LeaderTopic]
	switch {
	case ok && tm.Error.Code() != kafka.ErrNoError && tm.Error.Code() != kafka.ErrUnknownTopicOrPart && tm.Error.Code() != kafka.ErrUnknownTopic:
		// Not "missing": a topic that cannot be read (no Describe right, say) may well have a
		// leader.
		return status, fmt.Errorf("goneli: cannot read the metadata of %s: %w", config.LeaderTopic, tm.Error)
	case !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0:
		status.At = time.Now()
		return status, nil
	}
	conf := statusConfig(driver.ObserverConfig(consumerConf))
	// The consumer that reads the newest records needs Describe on its group, as librdkafka looks
	// up the group's coordinator, but it reports the broker's refusal only when that lookup is
	// answered (rdkafka_cgrp.c, rd_kafka_cgrp_handle_FindCoordinator), which can be after the
	// records it was assigned have been read: Describe without the grant failed or succeeded by
	// the timing. Asking for that group meanwhile makes it fail every time.
	statusGroup := fmt.Sprint(conf["group.id"])
	checkCtx, stopCheck := context.WithCancel(ctx)
	defer stopCheck()
	denied := make(chan error, 1)
	go func() {
		_, err := driver.DescribeGroup(checkCtx, driver.SideFirst{Side: side, Admin: admin}, statusGroup, max(time.Until(deadline), time.Millisecond))
		if ke := (kafka.Error{}); errors.As(err, &ke) && ke.Code() == kafka.ErrGroupAuthorizationFailed {
			denied <- authorizationError(config, "observer", ke)
			return
		}
		denied <- nil // any other answer, or none, leaves it to the consumer
	}()
	newest, err := readNewest(ctx, config, conf, len(tm.Partitions), logs)
	status.At = time.Now()
	if err != nil {
		stopCheck()
	}
	// Awaited whatever the outcome: the admin client and the side channel close when Describe
	// returns.
	if refused := <-denied; err == nil {
		err = refused
	}
	if err != nil {
		return status, err
	}
	for p, rec := range newest {
		rs := RoleStatus{Partition: int32(p), Owner: owners[int32(p)]}
		if rec != nil {
			rs.Role = rec.h.Role
			rs.Newest = RecordStatus{
				Name:   rec.name,
				Kind:   rec.h.Kind.String(),
				Sent:   time.Unix(0, rec.h.SentWall),
				Token:  rec.h.Token,
				Tenure: strconv.FormatUint(rec.h.Tenure, 16),
				Offset: rec.offset,
			}
			rs.Newest.Age = status.At.Sub(rs.Newest.Sent)
			// A heartbeat from well in the future says more about the sender's clock than about
			// its leadership, so it names no live leader either.
			lease := *config.HeartbeatTimeout
			if rec.h.Kind == core.KindHeartbeat && rec.h.Token > 0 && rs.Newest.Age <= lease && rs.Newest.Age >= -lease {
				rs.Leader = LeaderInfo{Role: rec.h.Role, Partition: int32(p), Name: rec.name, Address: rec.h.Address,
					Tenure: rs.Newest.Tenure, Token: rec.h.Token, Since: time.Unix(0, rec.h.Since), LastHeartbeat: rs.Newest.Sent}
			}
		}
		status.Roles = append(status.Roles, rs)
	}
	return status, nil
}

type newestRecord struct {
	h      core.Heartbeat
	name   string
	offset int64
}

// watermarkQuerier is implemented by *kafka.Consumer. A KafkaConsumerProvider's consumer that
// lacks it is read until librdkafka reports each partition's end, which a busy partition may
// never do before the deadline.
type watermarkQuerier interface {
	QueryWatermarkOffsets(topic string, partition int32, timeoutMs int) (low, high int64, err error)
}

// statusConfig derives the settings of Describe's consumer from the observer's: a group and a
// client.id of its own, under the observer's prefix, which the ACLs grant.
func statusConfig(observer kafka.ConfigMap) kafka.ConfigMap {
	observer["group.id"] = fmt.Sprint(observer["group.id"]) + "-status"
	observer["client.id"] = fmt.Sprint(observer["client.id"]) + "-status"
	return observer
}

// readNewest reads the last record of each of the topic's first partitions with a consumer that
// is assigned them directly. It asks for each partition's high watermark first and stops once it
// has read the record just below it: a partition that a leader writes to every few milliseconds
// has no quiet end to wait for.
func readNewest(ctx context.Context, config Config, conf kafka.ConfigMap, partitions int, logs *driver.LogForwarder) ([]*newestRecord, error) {
	conf["enable.partition.eof"] = true
	logs.Attach(conf)
	c, err := config.KafkaConsumerProvider(fromKafkaConfigMap(conf))
	if err != nil {
		return nil, fmt.Errorf("goneli: cannot create a consumer to read %s: %w", config.LeaderTopic, err)
	}
	defer c.Close()
	topic := config.LeaderTopic
	newest := make([]*newestRecord, partitions)
	// want is the offset of each partition's newest record; -1 once it is read or if there is none.
	want := make([]int64, partitions)
	left := 0
	var tps []kafka.TopicPartition
	wq, exact := c.(watermarkQuerier)
	for p := range partitions {
		offset := kafka.OffsetTail(1)
		if exact {
			deadline, _ := ctx.Deadline()
			low, high, err := wq.QueryWatermarkOffsets(topic, int32(p), int(max(time.Until(deadline), time.Millisecond).Milliseconds()))
			if err != nil {
				return nil, fmt.Errorf("goneli: cannot read the offsets of %s partition %d: %w", topic, p, err)
			}
			if high <= low {
				want[p] = -1
				continue
			}
			want[p], offset = high-1, kafka.Offset(high-1)
		}
		left++
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: offset})
	}
	if len(tps) == 0 {
		return newest, nil
	}
	if err := c.Assign(tps); err != nil {
		return nil, fmt.Errorf("goneli: cannot assign %s: %w", topic, err)
	}
	for left > 0 {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("goneli: reading the newest records of %s: %d of %d partitions unread: %w", topic, left, partitions, ctx.Err())
		}
		switch e := c.Poll(50).(type) {
		case *kafka.Message:
			p := int(e.TopicPartition.Partition)
			if e.TopicPartition.Error != nil || p < 0 || p >= partitions || want[p] < 0 {
				continue
			}
			var h core.Heartbeat
			if h.Decode(e.Value) == nil {
				newest[p] = &newestRecord{h: h, name: string(e.Key), offset: int64(e.TopicPartition.Offset)}
			}
			if exact && int64(e.TopicPartition.Offset) >= want[p] {
				want[p] = -1
				left--
			}
		case kafka.PartitionEOF:
			// Without watermarks, the end is the only sign of being done. With them it also ends a
			// partition whose record below the watermark went (retention trimmed it meanwhile).
			if p := int(e.Partition); p >= 0 && p < partitions && want[p] >= 0 {
				want[p] = -1
				left--
			}
		case kafka.Error:
			if err := authorizationError(config, "observer", e); err != nil {
				return nil, err
			}
			if e.IsFatal() {
				return nil, fmt.Errorf("goneli: reading %s: %w", topic, e)
			}
		}
	}
	return newest, nil
}
