package goneli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Under KIP-848 (group.protocol=consumer) the session timeout and the group heartbeat interval are
// the broker's, not the client's, so groupTiming cannot check them. The lease argument (lease.go,
// committed) needs the same thing of them as under the classic protocol: the coordinator cannot
// expel a member sooner than a session timeout after the last group heartbeat it had from it, which
// came at most one heartbeat interval before the send time of any heartbeat whose commit it
// accepted. So New reads both from the broker and refuses a HeartbeatTimeout unless
//
//	session timeout >= HeartbeatTimeout + 2 x heartbeat interval + margin
//
// (one interval for the argument, one for slack, and the margin that a session goneli derives for
// the classic protocol keeps for clocks that run at different rates: sessionMargin, a twentieth of
// the lease), where the session timeout is the group's own
// consumer.session.timeout.ms where one is set for the group (Kafka 4.0 or later), else the
// smallest group.consumer.session.timeout.ms of the brokers, and the heartbeat interval likewise
// consumer.heartbeat.interval.ms or the largest group.consumer.heartbeat.interval.ms. Whichever
// broker coordinates the group, the bound holds.
//
// A group's value counts only when its source is GROUP_CONFIG: Apache Kafka describes a GROUP
// resource's settings that are not set for the group with the answering broker's own defaults,
// source DEFAULT_CONFIG (ConfigHelper.createGroupConfigEntry), and the answering broker need not be
// the coordinator. Kafka 3.7 to 3.9 know no GROUP resource at all, and answer a DescribeConfigs
// that names one with INVALID_REQUEST for every resource in it
// (ConfigHelper.handleDescribeConfigsRequest, ConfigResource.Type.forId), so the group is asked
// for in a request of its own, and a broker's answer never depends on it.

// configDescriber is what New asks of a KafkaAdmin to read the broker's KIP-848 group timing. It
// is not part of KafkaAdmin, so that wrappers written for earlier versions still satisfy that;
// *kafka.AdminClient has it.
type configDescriber interface {
	DescribeConfigs(ctx context.Context, resources []kafka.ConfigResource, options ...kafka.DescribeConfigsAdminOption) ([]kafka.ConfigResourceResult, error)
}

// The names of the KIP-848 timing settings: per group (a GROUP config resource) and the broker's
// defaults for every group (a BROKER config resource).
const (
	groupSessionKey   = "consumer.session.timeout.ms"
	groupIntervalKey  = "consumer.heartbeat.interval.ms"
	brokerSessionKey  = "group.consumer.session.timeout.ms"
	brokerIntervalKey = "group.consumer.heartbeat.interval.ms"
)

// brokerSetting is a millisecond setting read from the broker, with where it came from.
type brokerSetting struct {
	value time.Duration
	from  string // for example `group "g" consumer.session.timeout.ms`; empty if not read
}

// consumerGroupTiming is the KIP-848 timing that the broker applies to a group, as far as it could
// be read.
type consumerGroupTiming struct {
	session, interval brokerSetting
	problems          []string // why something could not be read
}

// readConsumerGroupTiming describes the group's config resource and every broker's, at once and
// within timeout, or until ctx ends.
func readConsumerGroupTiming(ctx context.Context, cd configDescriber, group string, brokers []int32, timeout time.Duration) consumerGroupTiming {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	brokers = slices.Clone(brokers)
	slices.Sort(brokers)
	// librdkafka sends a request that names a broker's resource to that broker, and takes one
	// broker resource per request; the group's resource goes alone (see above).
	requests := [][]kafka.ConfigResource{{{Type: kafka.ResourceGroup, Name: group}}}
	for _, id := range brokers {
		requests = append(requests, []kafka.ConfigResource{{Type: kafka.ResourceBroker, Name: strconv.Itoa(int(id))}})
	}
	type answer struct {
		res []kafka.ConfigResourceResult
		err error
		req []kafka.ConfigResource
	}
	answers := make([]answer, len(requests))
	var wg sync.WaitGroup
	for i, req := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cd.DescribeConfigs(ctx, req, kafka.SetAdminRequestTimeout(timeout))
			answers[i] = answer{res: res, err: err, req: req}
		}()
	}
	wg.Wait()

	var t consumerGroupTiming
	var brokerSession, brokerInterval brokerSetting
	for _, a := range answers {
		if a.err != nil {
			for _, r := range a.req {
				t.problems = append(t.problems, fmt.Sprintf("%s %q: %v", strings.ToLower(r.Type.String()), r.Name, a.err))
			}
			continue
		}
		for _, r := range a.res {
			what := fmt.Sprintf("%s %q", strings.ToLower(r.Type.String()), r.Name)
			if r.Error.Code() != kafka.ErrNoError {
				t.problems = append(t.problems, fmt.Sprintf("%s: %v", what, r.Error))
				continue
			}
			switch r.Type {
			case kafka.ResourceGroup:
				t.session = t.session.or(groupSettingOf(r, groupSessionKey, what, &t.problems))
				t.interval = t.interval.or(groupSettingOf(r, groupIntervalKey, what, &t.problems))
			case kafka.ResourceBroker:
				if s := settingOf(r, brokerSessionKey, what, &t.problems); s.from != "" && (brokerSession.from == "" || s.value < brokerSession.value) {
					brokerSession = s
				}
				if s := settingOf(r, brokerIntervalKey, what, &t.problems); s.from != "" && (brokerInterval.from == "" || s.value > brokerInterval.value) {
					brokerInterval = s
				}
			}
		}
	}
	t.session = t.session.or(brokerSession)
	t.interval = t.interval.or(brokerInterval)
	return t
}

// or is s if it was read, else alt.
func (s brokerSetting) or(alt brokerSetting) brokerSetting {
	if s.from != "" {
		return s
	}
	return alt
}

// groupSettingOf is settingOf for a GROUP resource: only a value set for the group counts.
func groupSettingOf(r kafka.ConfigResourceResult, key, what string, problems *[]string) brokerSetting {
	if r.Config[key].Source != kafka.ConfigSourceGroup {
		return brokerSetting{}
	}
	return settingOf(r, key, what, problems)
}

// settingOf reads a millisecond setting from a described resource. A setting that is missing or
// empty (kfake describes a group's settings that were never set without a value) is not read; one
// that does not parse is a problem.
func settingOf(r kafka.ConfigResourceResult, key, what string, problems *[]string) brokerSetting {
	e, ok := r.Config[key]
	if !ok || strings.TrimSpace(e.Value) == "" {
		return brokerSetting{}
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(e.Value), 10, 64)
	if err != nil || ms <= 0 {
		*problems = append(*problems, fmt.Sprintf("%s %s=%q is not a positive number of milliseconds", what, key, e.Value))
		return brokerSetting{}
	}
	return brokerSetting{value: time.Duration(ms) * time.Millisecond, from: what + " " + key}
}

// judge checks the timing against a lease of ht. It returns a warning for what could not be
// checked (empty if everything was), or the error that refuses ht.
func (t consumerGroupTiming) judge(group string, ht time.Duration) (warning string, err error) {
	why := ""
	if len(t.problems) > 0 {
		why = " (" + strings.Join(t.problems, "; ") + ")"
	}
	if t.session.from == "" {
		return fmt.Sprintf("could not read the session timeout that the broker applies to group %s under KIP-848%s, "+
			"so cannot check that it covers HeartbeatTimeout (%v); keep the broker's group.consumer.session.timeout.ms "+
			"(or the group's consumer.session.timeout.ms) at least HeartbeatTimeout + 2 x its group.consumer.heartbeat.interval.ms",
			group, why, ht), nil
	}
	// Without the interval, only what any interval needs is checked.
	margin := core.SessionMargin(ht)
	floor, need := ht+margin, fmt.Sprintf("HeartbeatTimeout + a margin for clock rates (%v + %v)", ht, margin)
	if t.interval.from != "" {
		floor = ht + 2*t.interval.value + margin
		need = fmt.Sprintf("HeartbeatTimeout + 2 x the group heartbeat interval + a margin for clock rates (%v + 2 x %v (%s) + %v = %v)",
			ht, t.interval.value, t.interval.from, margin, floor)
	}
	if t.session.value < floor {
		advice := "raise the session timeout"
		if fits := maxLeaseFor(t.session.value, floor-ht-margin); fits >= MinHeartbeatTimeout {
			advice = fmt.Sprintf("lower HeartbeatTimeout to at most %v, or raise the session timeout", fits)
		}
		return "", &ConfigError{Field: "HeartbeatTimeout", Value: ht,
			Reason: fmt.Sprintf("unsafe with the broker's KIP-848 session for group %s: its session timeout, %v (%s), must be at least %s, "+
				"so that a leader cut off from Kafka fences itself before the coordinator can expel it; %s",
				group, t.session.value, t.session.from, need, advice)}
	}
	if t.interval.from == "" {
		return fmt.Sprintf("could not read the group heartbeat interval that the broker applies to group %s under KIP-848%s; "+
			"checked only that its session timeout, %v (%s), is at least HeartbeatTimeout (%v) and a margin, not HeartbeatTimeout + 2 x the interval",
			group, why, t.session.value, t.session.from, ht), nil
	}
	return "", nil
}

// checkConsumerGroupSession reads the broker's KIP-848 timing for the group and refuses a
// HeartbeatTimeout that its session does not cover; what cannot be read is logged and let through.
// What was read replaces the client-side timing that the log line of New reports.
func (d *driver) checkConsumerGroupSession(admin KafkaAdmin, brokers []int32) error {
	ht := *d.config.HeartbeatTimeout
	var t consumerGroupTiming
	if cd, ok := admin.(configDescriber); ok {
		t = readConsumerGroupTiming(context.Background(), cd, d.config.LeaderGroupID, brokers, ht)
	} else {
		t.problems = []string{"the KafkaAdmin cannot describe configs"}
	}
	warning, err := t.judge(d.config.LeaderGroupID, ht)
	if err != nil {
		return err
	}
	if warning != "" {
		d.log.W()("goneli %s: %s", d.config.Name, warning)
	}
	d.timing.BrokerSession, d.timing.BrokerInterval = t.session.value, t.interval.value
	return nil
}

// maxLeaseFor is the longest HeartbeatTimeout that a session of session covers beside two group
// heartbeat intervals (intervals), margin included: the margin grows with the lease
// (sessionMargin), so it is found by stepping down from what the session leaves without one.
func maxLeaseFor(session, intervals time.Duration) time.Duration {
	ht := session - intervals
	for ht > 0 && ht+core.SessionMargin(ht) > session-intervals {
		ht -= time.Millisecond
	}
	return ht
}

// sessionReader returns what a group check under KIP-848 reads the group's session timing with,
// beside the description: the describer itself where it can describe configs (goneli's own
// connection, an admin client), nil under the classic protocol or where it cannot.
func (d *driver) sessionReader(desc groupDescriber) func(context.Context) consumerGroupTiming {
	cd, ok := desc.(configDescriber)
	if d.timing.Classic || !ok {
		return nil
	}
	group, brokers, ht := d.config.LeaderGroupID, slices.Clone(d.brokers), *d.config.HeartbeatTimeout
	return func(ctx context.Context) consumerGroupTiming {
		return readConsumerGroupTiming(ctx, cd, group, brokers, ht)
	}
}

// checkSessionAgain judges the KIP-848 session timing that a group check read beside its
// description. New checked it once, but an operator can lower a group's consumer.session.timeout.ms
// (Kafka 4.0) or the brokers' default while instances run, and a lease longer than the session no
// longer runs out before the coordinator can expel its holder: so every tenure, and every tenure
// that leads again after a fence, reads it again before it leads (lease.recheck), and does not lead
// while the session is too short for the lease (the check fails, and is retried like a failed
// one). What it reads also replaces the timing the window for explicit commits is measured with.
func (d *driver) checkSessionAgain(t consumerGroupTiming) error {
	warning, err := t.judge(d.config.LeaderGroupID, *d.config.HeartbeatTimeout)
	if err != nil {
		d.throttle.log(d.log.E(), "session848", "goneli %s: not leading: %v", d.config.Name, err)
		return err
	}
	if warning != "" {
		d.throttle.log(d.log.W(), "session848-read", "goneli %s: %s", d.config.Name, warning)
		return nil
	}
	if t.session.value != d.timing.BrokerSession || t.interval.value != d.timing.BrokerInterval {
		d.log.I()("goneli %s: the broker's KIP-848 session for group %s is now %v (%s), group heartbeat %v (%s)",
			d.config.Name, d.config.LeaderGroupID, t.session.value, t.session.from, t.interval.value, t.interval.from)
		d.timing.BrokerSession, d.timing.BrokerInterval = t.session.value, t.interval.value
		d.machine(func(m *core.Machine) { m.UseTiming(d.timing) })
	}
	return nil
}
