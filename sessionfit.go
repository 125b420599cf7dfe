package goneli

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

// fitSession raises a derived classic session timeout to the brokers' group.min.session.timeout.ms
// where that is higher, so that a lease shorter than the broker allows a session for still joins:
// a longer session is as safe (the lease runs out sooner than the coordinator can expel), only
// slower to replace a crashed leader. The largest minimum among the brokers counts, since any of
// them may coordinate the group. A session the application set is left alone, and a minimum that
// cannot be read leaves the derived session, which the broker then refuses with a
// SessionTimeoutError that says what to do.
func (d *driver) fitSession(admin KafkaAdmin, brokers []int32) {
	t := &d.timing
	if !t.Classic || t.UserSession || t.Session >= kafkaMinSession || len(brokers) == 0 {
		return
	}
	cd, ok := admin.(configDescriber)
	if !ok {
		return
	}
	ht := *d.config.HeartbeatTimeout
	ctx, cancel := context.WithTimeout(context.Background(), ht)
	lo, _, problems := brokerSessionBounds(ctx, cd, brokers, kafka.SetAdminRequestTimeout(ht))
	cancel()
	if len(problems) > 0 {
		d.log.D()("goneli %s: could not read every broker's %s (%s); keeping the session timeout at %v unless one was read",
			d.config.Name, minSessionKey, strings.Join(problems, "; "), t.Session)
	}
	floor := lo.value
	if floor <= t.Session {
		return
	}
	d.log.I()("goneli %s: session timeout raised from %v to %v (%s); a crashed leader is replaced that much later",
		d.config.Name, t.Session, floor, lo.from)
	t.Session = floor
	(*d.confs.consumer)["session.timeout.ms"] = int(floor.Milliseconds())
	if t.MaxPoll < floor {
		t.MaxPoll = floor
		(*d.confs.consumer)["max.poll.interval.ms"] = int(floor.Milliseconds())
	}
}

// brokerSessionBounds describes every broker's config at once and returns the largest
// group.min.session.timeout.ms and the smallest group.max.session.timeout.ms among them (any broker
// may coordinate the group, so a session must suit every one), with what could not be read. New
// (fitSession) and the doctor (checkSession) share it.
func brokerSessionBounds(ctx context.Context, cd configDescriber, brokers []int32, opts ...kafka.DescribeConfigsAdminOption) (lo, hi brokerSetting, problems []string) {
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
		if s := settingOf(a.res[0], minSessionKey, what, &problems); s.from != "" && (lo.from == "" || s.value > lo.value) {
			lo = s
		}
		if s := settingOf(a.res[0], "group.max.session.timeout.ms", what, &problems); s.from != "" && (hi.from == "" || s.value < hi.value) {
			hi = s
		}
	}
	return lo, hi, problems
}
