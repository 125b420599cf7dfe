package driver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// kafkaMinSession is Apache Kafka's default group.min.session.timeout.ms. A derived session below
// it is likely to be refused, so New reads the brokers' own minimum first (fitSession); at or above
// it, New spends no request on that.
const kafkaMinSession = 6 * time.Second

// minSessionKey is the broker setting below which a classic JoinGroup is refused with
// INVALID_SESSION_TIMEOUT.
const minSessionKey = "group.min.session.timeout.ms"

// fitSession raises a derived classic session timeout below Apache Kafka's default minimum (leases
// under about 4.8 s: the derived session is 1.25 times the lease) to what the brokers accept: their
// group.min.session.timeout.ms where New can read it and it is higher, the largest among the
// brokers read, since any of them may coordinate the group; and where no broker's can be read (no
// DescribeConfigs on the cluster, usual for an application's principal on a managed cluster; a
// KafkaAdmin that cannot describe configs; no broker reached), Kafka's default minimum, 6 s. Left
// alone, a derived session that the brokers' minimum refuses makes every JoinGroup fail, and Pulse
// return a fatal SessionTimeoutError. A session the application set is left alone.
//
// A longer session is as safe. The lease's argument (goneli's package doc; internal/core, lease.go) needs the
// coordinator to keep a member for at least HeartbeatTimeout plus two group heartbeat intervals and
// a margin after the group heartbeat that preceded a renewing commit's heartbeat: a session of
// floor or more does, and a longer one keeps it longer still, so the lease runs out even further
// ahead of the expulsion. The rebalance timeout (max.poll.interval.ms), which must be at least the
// session (the fourth assumption), is raised with it, and the window for explicit commits, which
// rests on it (expelBound), is measured from the raised value, as join hands the leases the timing
// this leaves. What a longer session costs is failover: a crashed or cut-off leader's partition is
// reassigned a session timeout after its last group heartbeat, so that much later.
func (d *Driver) fitSession(admin KafkaAdmin, brokers []int32) {
	t := &d.timing
	if !t.Classic || t.UserSession || t.Session >= kafkaMinSession {
		return
	}
	ht := *d.config.HeartbeatTimeout
	var lo BrokerSetting
	var problems []string
	cd, ok := admin.(configDescriber)
	switch {
	case len(brokers) == 0:
		problems = []string{"no broker was reached"}
	case !ok:
		problems = []string{"the KafkaAdmin cannot describe configs"}
	default:
		ctx, cancel := context.WithTimeout(context.Background(), ht)
		lo, _, problems = BrokerSessionBounds(ctx, cd, brokers, kafka.SetAdminRequestTimeout(ht))
		cancel()
	}
	if len(problems) > 0 && lo.From != "" {
		d.log.D()("goneli %s: could not read every broker's %s (%s); the largest of those read is %v",
			d.config.Name, minSessionKey, strings.Join(problems, "; "), lo.Value)
	}
	if lo.From == "" {
		d.log.W()("goneli %s: could not read the brokers' %s (%s), so the session timeout is raised from %v to Apache Kafka's default "+
			"minimum, %v, which a broker that keeps the default accepts; a crashed leader is replaced that much later. Grant DescribeConfigs "+
			"on the cluster for New to read the brokers' own minimum, or set KafkaConfig[\"session.timeout.ms\"]",
			d.config.Name, minSessionKey, strings.Join(problems, "; "), t.Session, kafkaMinSession)
		d.raiseSession(kafkaMinSession)
		return
	}
	if lo.Value <= t.Session {
		return
	}
	d.log.I()("goneli %s: session timeout raised from %v to %v (%s); a crashed leader is replaced that much later",
		d.config.Name, t.Session, lo.Value, lo.From)
	d.raiseSession(lo.Value)
}

// raiseSession sets the classic session timeout to session, and the rebalance timeout to at least
// that (fitSession).
func (d *Driver) raiseSession(session time.Duration) {
	t := &d.timing
	t.Session = session
	(*d.confs.consumer)["session.timeout.ms"] = int(session.Milliseconds())
	if t.MaxPoll < session {
		t.MaxPoll = session
		(*d.confs.consumer)["max.poll.interval.ms"] = int(session.Milliseconds())
	}
}

// BrokerSessionBounds describes every broker's config at once and returns the largest
// group.min.session.timeout.ms and the smallest group.max.session.timeout.ms among them (any broker
// may coordinate the group, so a session must suit every one), with what could not be read. New
// (fitSession) and the doctor (checkSession) share it.
func BrokerSessionBounds(ctx context.Context, cd configDescriber, brokers []int32, opts ...kafka.DescribeConfigsAdminOption) (lo, hi BrokerSetting, problems []string) {
	type answer struct {
		res []kafka.ConfigResourceResult
		err error
	}
	answers := make([]answer, len(brokers))
	var wg sync.WaitGroup
	for i, id := range brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// librdkafka sends a broker's resource to that broker, one per request.
			res, err := cd.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceBroker, Name: strconv.Itoa(int(id))}}, opts...)
			answers[i] = answer{res, err}
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if a.err == nil && len(a.res) != 1 {
			a.err = fmt.Errorf("%d results for one resource", len(a.res))
		}
		if a.err == nil && a.res[0].Error.Code() != kafka.ErrNoError {
			a.err = a.res[0].Error
		}
		if a.err != nil {
			problems = append(problems, fmt.Sprintf("broker %d: %v", brokers[i], a.err))
			continue
		}
		what := fmt.Sprintf("broker %d", brokers[i])
		if s := settingOf(a.res[0], minSessionKey, what, &problems); s.From != "" && (lo.From == "" || s.Value > lo.Value) {
			lo = s
		}
		if s := settingOf(a.res[0], "group.max.session.timeout.ms", what, &problems); s.From != "" && (hi.From == "" || s.Value < hi.Value) {
			hi = s
		}
	}
	return lo, hi, problems
}
