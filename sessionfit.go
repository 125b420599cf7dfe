package goneli

import (
	"context"
	"fmt"
	"strconv"
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
	if !t.classic || t.userSession || t.session >= kafkaMinSession || len(brokers) == 0 {
		return
	}
	cd, ok := admin.(configDescriber)
	if !ok {
		return
	}
	floor, from, problem := readBrokerMinSession(cd, brokers, *d.config.HeartbeatTimeout)
	if problem != "" {
		d.log.D()("goneli %s: could not read the brokers' %s (%s); keeping the session timeout at %v", d.config.Name, minSessionKey, problem, t.session)
	}
	if floor <= t.session {
		return
	}
	d.log.I()("goneli %s: session timeout raised from %v to %v, the %s of broker %s; a crashed leader is replaced that much later",
		d.config.Name, t.session, floor, minSessionKey, from)
	t.session = floor
	(*d.confs.consumer)["session.timeout.ms"] = int(floor.Milliseconds())
	if t.maxPoll < floor {
		t.maxPoll = floor
		(*d.confs.consumer)["max.poll.interval.ms"] = int(floor.Milliseconds())
	}
}

// readBrokerMinSession describes every broker's config at once, within timeout, and returns the
// largest group.min.session.timeout.ms with the broker it came from, and what could not be read.
func readBrokerMinSession(cd configDescriber, brokers []int32, timeout time.Duration) (floor time.Duration, from, problem string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
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
			res, err := cd.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceBroker, Name: strconv.Itoa(int(id))}},
				kafka.SetAdminRequestTimeout(timeout))
			answers[i] = answer{res, err}
		}()
	}
	wg.Wait()
	var problems []string
	for i, a := range answers {
		if a.err != nil {
			problems = append(problems, fmt.Sprintf("broker %d: %v", brokers[i], a.err))
			continue
		}
		for _, r := range a.res {
			if r.Error.Code() != kafka.ErrNoError {
				problems = append(problems, fmt.Sprintf("broker %s: %v", r.Name, r.Error))
				continue
			}
			s := settingOf(r, minSessionKey, "broker "+r.Name, &problems)
			if s.from != "" && s.value > floor {
				floor, from = s.value, r.Name
			}
		}
	}
	if len(problems) > 0 {
		problem = fmt.Sprint(problems)
	}
	return floor, from, problem
}
