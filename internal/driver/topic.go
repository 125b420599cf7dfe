package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// LeaderTopicConfig keeps the topic small: only the last few seconds of heartbeats matter.
var LeaderTopicConfig = map[string]string{
	"cleanup.policy": "delete",
	"retention.ms":   "600000",
	"segment.ms":     "600000",
}

// partitionCreator is what ensureTopic asks of a KafkaAdmin to grow the leader topic. It is not
// part of KafkaAdmin, so that wrappers written for earlier versions still satisfy it;
// *kafka.AdminClient has it.
type partitionCreator interface {
	CreatePartitions(ctx context.Context, partitions []kafka.PartitionsSpecification, options ...kafka.CreatePartitionsAdminOption) ([]kafka.TopicResult, error)
}

// join makes sure that the leader topic and the group are fit to lead in (prepareGroup), and
// subscribes a new consumer to the topic.
func (d *Driver) join() error {
	if err := d.prepareGroup(); err != nil {
		return err
	}
	// What New read of the broker's session (fitSession, checkConsumerGroupSession) bounds how long
	// a lease may renew on explicit commits.
	d.machine(func(m *core.Machine) { m.UseTiming(d.timing) })
	consumer, err := d.config.KafkaConsumerProvider(d.confs.consumer)
	if err != nil {
		return fmt.Errorf("goneli: cannot create Kafka consumer: %w", err)
	}
	if !d.prio.standby {
		if err := consumer.Subscribe(d.topic, d.onRebalance); err != nil {
			_ = consumer.Close()
			return fmt.Errorf("goneli: cannot subscribe to leader topic %q: %w", d.topic, err)
		}
	}
	d.consumer = consumer
	d.commits = newCommitter(consumer, &d.closers)
	d.machine(func(m *core.Machine) { m.NewGate(d.storerOf(consumer)) })
	return nil
}

// prepareGroup makes sure that the leader topic exists with a partition for every role and that
// the group has no members on other leader topics or with other role lists.
func (d *Driver) prepareGroup() error {
	admin, err := d.config.KafkaAdminProvider(d.confs.admin)
	if err != nil {
		return fmt.Errorf("goneli: cannot create Kafka admin client: %w", err)
	}
	defer admin.Close()
	brokers, reached, err := d.ensureTopic(admin)
	if err != nil || !reached {
		// Not reached: New has spent its HeartbeatTimeout, and the first tenure checks again anyway.
		// A broker may be on its way up, but a port of another service will never answer.
		if err == nil {
			err = checkSpeaksKafka(*d.confs.admin, reachTimeout, d.config.Errors)
		}
		if err == nil && len(d.parts) > 1 {
			d.log.W()("goneli %s: could not make sure that leader topic %s has a partition for each of the %d roles; "+
				"roles beyond its partitions have no leader until a contender that reaches the broker adds them",
				d.config.Name, d.topic, len(d.parts))
		}
		if err == nil && !d.timing.Classic {
			d.log.W()("goneli %s: could not reach the broker to read the session timeout it applies to group %s under KIP-848, "+
				"so cannot check yet that it covers HeartbeatTimeout (%v); no tenure leads until it can be read",
				d.config.Name, d.config.LeaderGroupID, *d.config.HeartbeatTimeout)
		}
		if err == nil {
			// Nothing was reached to read the brokers' minimum session from.
			d.fitSession(admin, nil)
		}
		return err
	}
	d.brokers = brokers
	d.fitSession(admin, brokers)
	d.m.Check.Count.Add(1)
	if !d.timing.Classic {
		if err := d.checkConsumerGroupSession(admin, brokers); err != nil {
			return err
		}
	}
	desc, err := DescribeGroup(context.Background(), SideFirst{d.check.wire, admin}, d.config.LeaderGroupID, *d.config.HeartbeatTimeout)
	if err != nil {
		// The first tenure checks again before it leads; this check only refuses early.
		d.log.W()("goneli %s: could not describe group %s (%v); its members are checked before this instance leads",
			d.config.Name, d.config.LeaderGroupID, err)
		return nil
	}
	d.standbyAtJoin(desc)
	if v := core.JudgeGroup(describedOf(desc), d.topic, d.clientID, "", 0); v.Conflict != nil {
		if v.Conflict.Definite() {
			return v.Conflict
		}
		// A member whose partitions' topic the broker does not name may well use this topic: New
		// cannot refuse on that, but no tenure leads while such a member holds a partition.
		d.log.W()("goneli %s: %v", d.config.Name, v.Conflict)
	}
	return nil
}

// ensureTopic creates the leader topic with a partition per role if the broker says it is missing,
// or adds partitions to one that has too few, and reports whether the broker could be reached, and
// the ids of the brokers in the cluster if so. If it could not be reached in time the check is
// skipped: the consumer reports a missing topic later, through Pulse's logs.
//
// Contenders that start together race to create and grow the topic: a creation that finds the
// topic made meanwhile (TOPIC_ALREADY_EXISTS), or a growth that finds it grown (INVALID_PARTITIONS),
// looks again rather than taking the other's topic for one that fits, or failing: a topic that
// something else made, with fewer partitions, is grown like any other.
func (d *Driver) ensureTopic(admin KafkaAdmin) (brokers []int32, reached bool, err error) {
	timeout := *d.config.HeartbeatTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		var again bool
		brokers, reached, again, err = d.ensureTopicOnce(ctx, admin, timeout)
		if !again || attempt == 3 || ctx.Err() != nil {
			return brokers, reached, err
		}
	}
}

// ensureTopicOnce is one look at the leader topic, and one change to it if it needs one; again
// says that another client changed the topic meanwhile, and a second look may find it fit.
func (d *Driver) ensureTopicOnce(ctx context.Context, admin KafkaAdmin, timeout time.Duration) (brokers []int32, reached, again bool, err error) {
	need := len(d.parts)
	md, err := admin.GetMetadata(&d.topic, false, int(timeout.Milliseconds()))
	if err != nil {
		d.log.W()("goneli %s: could not check leader topic %s within %v (%v); continuing", d.config.Name, d.topic, timeout, err)
		d.unreachable("admin", fmt.Sprintf("no metadata for leader topic %s within %v: %v", d.topic, timeout, err))
		return nil, false, false, nil
	}
	for _, b := range md.Brokers {
		brokers = append(brokers, b.ID)
	}
	tm, ok := md.Topics[d.topic]
	if ok && tm.Error.Code() == kafka.ErrNoError {
		has := len(tm.Partitions)
		switch {
		case has > need:
			d.log.W()("goneli %s: leader topic %s has %d partitions; %d are used, and the others count towards the balance of the assignment",
				d.config.Name, d.topic, has, need)
		case has < need:
			pc, ok := admin.(partitionCreator)
			if !ok {
				return brokers, true, false, d.config.Errors.Partitions(d.topic, has, need, errors.New("the KafkaAdmin cannot add partitions"))
			}
			res, err := pc.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: d.topic, IncreaseTo: need}},
				kafka.SetAdminOperationTimeout(timeout))
			if err == nil && len(res) == 1 {
				err = res[0].Error
				switch res[0].Error.Code() {
				case kafka.ErrNoError:
					d.log.I()("goneli %s: added partitions to leader topic %s: %d, was %d", d.config.Name, d.topic, need, has)
					return brokers, true, false, nil
				case kafka.ErrInvalidPartitions:
					// Kafka's answer when the topic has as many partitions as asked for already
					// ("Topic already has 64 partition(s)."): another contender added them.
					again = true
				}
			}
			if IsCode(err, kafka.ErrTopicAuthorizationFailed) {
				// Kafka authorises CreatePartitions by Alter on the topic
				// (ControllerApis.handleCreatePartitions).
				err = d.config.Errors.Refused("Alter", "topic", d.topic, err)
			}
			return brokers, true, again, d.config.Errors.Partitions(d.topic, has, need, err)
		}
		return brokers, true, false, nil
	}
	if ok && tm.Error.Code() != kafka.ErrUnknownTopicOrPart && tm.Error.Code() != kafka.ErrUnknownTopic {
		return brokers, true, false, d.config.Errors.Topic(d.topic, 0, tm.Error)
	}
	spec := kafka.TopicSpecification{Topic: d.topic, NumPartitions: need, ReplicationFactor: -1, Config: LeaderTopicConfig}
	if rf := d.config.LeaderTopicReplicationFactor; rf > 0 {
		spec.ReplicationFactor = rf
		if rf >= 2 {
			spec.Config = maps.Clone(LeaderTopicConfig)
			spec.Config["min.insync.replicas"] = strconv.Itoa(min(2, rf-1))
		}
	}
	res, err := admin.CreateTopics(ctx, []kafka.TopicSpecification{spec}, kafka.SetAdminOperationTimeout(timeout))
	if err == nil && len(res) == 1 {
		err = res[0].Error
		switch res[0].Error.Code() {
		case kafka.ErrNoError:
			d.log.I()("goneli %s: created leader topic %s", d.config.Name, d.topic)
			return brokers, true, false, nil
		case kafka.ErrTopicAlreadyExists:
			// Made meanwhile, by another contender or by something else: its partitions are to be
			// counted like those of any topic found.
			return brokers, true, true, nil
		}
	}
	if IsCode(err, kafka.ErrTopicAuthorizationFailed) || IsCode(err, kafka.ErrClusterAuthorizationFailed) {
		// Kafka authorises CreateTopics by Create on the cluster or on the topic
		// (ControllerApis.handleCreateTopics): the error names the narrower grant.
		err = d.config.Errors.Refused("Create", "topic", d.topic, err)
	}
	return brokers, true, false, d.config.Errors.Topic(d.topic, need, err)
}
