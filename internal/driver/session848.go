package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/core"
)

// Under KIP-848 (group.protocol=consumer) the session timeout and the group heartbeat interval are
// the broker's, not the client's, so groupTiming cannot check them. The lease argument (internal/core, lease.go,
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
//
// # Unknown means unknown
//
// The brokers' defaults count only where the group is known to set none of its own: its resource
// was described, or the brokers know no group resource (INVALID_REQUEST, Kafka before 4.0, where a
// group cannot set one). A group resource the principal may not describe (GROUP_AUTHORIZATION_FAILED,
// ConfigHelper) or that did not answer leaves the group's own settings unknown, and they may be far
// shorter than the brokers' defaults (GroupMetadataManager.consumerGroupSessionTimeoutMs takes the
// group's consumer.session.timeout.ms over the broker's): a 20 s lease would pass against a 45 s
// default on a group whose session is 2 s. So a session or interval that cannot be known refuses
// to lead (judge returns a *SessionUnknownError):
//   - New fails with it where the broker refused what would tell (an *AuthorizationError naming the
//     DescribeConfigs grant is inside it): no retry mends a missing ACL, and an instance that never
//     leads would say so only in its log. Where it merely could not be read (no broker answered in
//     time, a KafkaAdmin that cannot describe configs), New warns and goes on;
//   - each tenure's check fails with it, so that the tenure does not lead, and is retried;
//   - the doctor's session line FAILs where the broker refused, and warns otherwise.
// No setting lets an application assert the session instead: a wrong assertion is two leaders.
//
// # How long a tenure waits for the brokers
//
// Every tenure reads the group's resource afresh, as an operator can change a group's settings
// while instances run (IncrementalAlterConfigs on the GROUP resource), at the same time as it
// describes the group, and over goneli's own connection from the broker that just described it,
// the coordinator (sidechan's groupResource), which answers with what it applies. The brokers' defaults
// cannot change without a restart (GroupCoordinatorConfig's settings are not among
// DynamicBrokerConfig's reconfigurable ones), so what each broker last answered is kept
// (brokerTimings), and a tenure waits for a broker that answered before, or was asked before and
// did not answer, only timingWait, a tenth of the lease; one that does not answer by then counts
// with its last answer, if it gave one. A broker cut off from the instance (a zone outage) so costs
// a new leader a tenth of a lease, not a lease. A broker that has never answered is left out, with
// a problem noted, as long as another answered: brokers of a cluster share these settings unless
// misconfigured, and one that cannot be reached serves no group to this instance.

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

// BrokerSetting is a millisecond setting read from the broker, with where it came from.
type BrokerSetting struct {
	Value time.Duration
	From  string // for example `group "g" consumer.session.timeout.ms`; empty if not read
}

// ConsumerGroupTiming is the KIP-848 timing that the broker applies to a group, as far as it could
// be read.
type ConsumerGroupTiming struct {
	Session, Interval BrokerSetting
	problems          []string // why something could not be read
	// refused is the grant whose absence kept the session or interval from being known, if the
	// broker refused one; unanswered is the error of the group resource's request if it failed
	// without the broker's answer (over goneli's own connection, a failure of the connection:
	// sidefail.go).
	refused error
	// errs makes the errors Judge returns.
	errs       Errors
	unanswered error
}

// timingWait is how long a tenure's check waits for a broker's settings that it has asked for
// before (see "How long a tenure waits for the brokers").
func timingWait(ht time.Duration) time.Duration {
	return ht / 10
}

// brokerTimings keeps what each broker answered for its KIP-848 group defaults, across reads, and
// the brokers' ids where New could not learn them. Safe for concurrent use.
type brokerTimings struct {
	mu     sync.Mutex
	asked  map[int32]bool
	answer map[int32]brokerTiming
	ids    []int32
}

// brokerLister is what lists the brokers' ids for a read whose instance has none (New reached no
// broker): goneli's own connection, or a KafkaAdmin through its metadata.
type brokerLister interface {
	BrokerIDs(ctx context.Context) ([]int32, error)
}

// metadataGetter is the part of a KafkaAdmin that lists the brokers.
type metadataGetter interface {
	GetMetadata(topic *string, allTopics bool, timeoutMs int) (*kafka.Metadata, error)
}

// adminBrokers lists the brokers through a KafkaAdmin's metadata.
type adminBrokers struct {
	admin   metadataGetter
	timeout time.Duration
}

func (a adminBrokers) BrokerIDs(context.Context) ([]int32, error) {
	md, err := a.admin.GetMetadata(nil, false, int(a.timeout.Milliseconds()))
	if err != nil {
		return nil, err
	}
	ids := make([]int32, 0, len(md.Brokers))
	for _, b := range md.Brokers {
		ids = append(ids, b.ID)
	}
	return ids, nil
}

// brokersFor returns the brokers to read: those given, else those listed before, else those lister
// lists now (kept for later reads).
func (b *brokerTimings) brokersFor(ctx context.Context, given []int32, lister brokerLister) ([]int32, error) {
	if len(given) > 0 || b == nil {
		return given, nil
	}
	b.mu.Lock()
	ids := slices.Clone(b.ids)
	b.mu.Unlock()
	if len(ids) > 0 || lister == nil {
		return ids, nil
	}
	ids, err := lister.BrokerIDs(ctx)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	b.mu.Lock()
	b.ids = slices.Clone(ids)
	b.mu.Unlock()
	return ids, nil
}

// brokerTiming is one broker's answer: its session and interval defaults, either unread.
type brokerTiming struct {
	session, interval BrokerSetting
}

// seen reports whether broker id was asked before.
func (b *brokerTimings) seen(id int32) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.asked[id]
}

// record notes that broker id was asked, and what it answered if answered.
func (b *brokerTimings) record(id int32, t brokerTiming, answered bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.asked == nil {
		b.asked, b.answer = map[int32]bool{}, map[int32]brokerTiming{}
	}
	b.asked[id] = true
	if answered {
		b.answer[id] = t
	}
}

// last is broker id's last answer, if it gave one.
func (b *brokerTimings) last(id int32) (brokerTiming, bool) {
	if b == nil {
		return brokerTiming{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.answer[id]
	return t, ok
}

// timingRead is one read of a group's KIP-848 timing.
type timingRead struct {
	cd      configDescriber
	errs    Errors
	group   string
	brokers []int32
	// timeout bounds each request; wait, where positive, bounds the wait for a broker asked before
	// (a tenure's check), and kept holds what the brokers answered before (nil: nothing kept).
	timeout, wait time.Duration
	kept          *brokerTimings
	// lister lists the brokers where brokers and kept have none.
	lister brokerLister
}

// ReadConsumerGroupTiming describes the group's config resource and every broker's, at once and
// within timeout, or until ctx ends (New, the doctor).
func ReadConsumerGroupTiming(ctx context.Context, cd configDescriber, errs Errors, group string, brokers []int32, timeout time.Duration) ConsumerGroupTiming {
	return timingRead{cd: cd, errs: errs, group: group, brokers: brokers, timeout: timeout}.read(ctx)
}

// read describes the group's config resource and every broker's at once, and returns what they say.
func (r timingRead) read(ctx context.Context) ConsumerGroupTiming {
	ctx, cancel := context.WithTimeout(ctx, r.timeout+time.Second)
	defer cancel()
	t := ConsumerGroupTiming{errs: r.errs}
	brokers, err := r.kept.brokersFor(ctx, r.brokers, r.lister)
	if err != nil {
		t.problems = append(t.problems, fmt.Sprintf("the brokers could not be listed: %v", err))
	}
	brokers = slices.Clone(brokers)
	slices.Sort(brokers)
	type answer struct {
		res []kafka.ConfigResourceResult
		err error
	}
	// librdkafka sends a request that names a broker's resource to that broker, and takes one
	// broker resource per request; the group's resource goes alone (see above).
	ask := func(ctx context.Context, res kafka.ConfigResource) answer {
		out, err := r.cd.DescribeConfigs(ctx, []kafka.ConfigResource{res}, kafka.SetAdminRequestTimeout(r.timeout))
		if err == nil && len(out) != 1 {
			err = fmt.Errorf("%d results for one resource", len(out))
		}
		return answer{out, err}
	}
	var groupAnswer answer
	brokerAnswers := make([]answer, len(brokers))
	var wg sync.WaitGroup
	wg.Add(1 + len(brokers))
	go func() {
		defer wg.Done()
		groupAnswer = ask(ctx, kafka.ConfigResource{Type: kafka.ResourceGroup, Name: r.group})
	}()
	for i, id := range brokers {
		bctx, bcancel := ctx, context.CancelFunc(func() {})
		if r.wait > 0 && r.kept.seen(id) {
			bctx, bcancel = context.WithTimeout(ctx, r.wait)
		}
		go func() {
			defer wg.Done()
			defer bcancel()
			brokerAnswers[i] = ask(bctx, kafka.ConfigResource{Type: kafka.ResourceBroker, Name: strconv.Itoa(int(id))})
		}()
	}
	wg.Wait()

	groupKnown := t.readGroup(r.group, groupAnswer.res, groupAnswer.err)
	var brokerSession, brokerInterval BrokerSetting
	var refusedBrokers error
	for i, id := range brokers {
		a, what := brokerAnswers[i], fmt.Sprintf("broker %q", strconv.Itoa(int(id)))
		if a.err == nil && a.res[0].Error.Code() != kafka.ErrNoError {
			a.err = a.res[0].Error
		}
		var bt brokerTiming
		if a.err == nil {
			bt.session = settingOf(a.res[0], brokerSessionKey, what, &t.problems)
			bt.interval = settingOf(a.res[0], brokerIntervalKey, what, &t.problems)
		} else {
			if IsCode(a.err, kafka.ErrClusterAuthorizationFailed) {
				refusedBrokers = a.err
			}
			last, ok := r.kept.last(id)
			if ok && r.wait > 0 {
				bt = last
				t.problems = append(t.problems, fmt.Sprintf("%s: %v; its last answer counts", what, a.err))
			} else {
				t.problems = append(t.problems, fmt.Sprintf("%s: %v", what, a.err))
			}
		}
		r.kept.record(id, bt, a.err == nil)
		if s := bt.session; s.From != "" && (brokerSession.From == "" || s.Value < brokerSession.Value) {
			brokerSession = s
		}
		if s := bt.interval; s.From != "" && (brokerInterval.From == "" || s.Value > brokerInterval.Value) {
			brokerInterval = s
		}
	}
	if !groupKnown {
		return t
	}
	t.Session = t.Session.or(brokerSession)
	t.Interval = t.Interval.or(brokerInterval)
	if (t.Session.From == "" || t.Interval.From == "") && refusedBrokers != nil {
		t.refused = t.errs.Refused("DescribeConfigs", "cluster", "kafka-cluster", refusedBrokers)
	}
	return t
}

// readGroup takes the answer for the group's resource, and reports whether it tells the group's own
// settings: those it sets, or that it sets none.
func (t *ConsumerGroupTiming) readGroup(group string, res []kafka.ConfigResourceResult, err error) bool {
	what := fmt.Sprintf("group %q", group)
	if err == nil && res[0].Error.Code() != kafka.ErrNoError {
		err = res[0].Error
	} else if err != nil {
		// No broker's answer about the resource: the request itself failed.
		t.unanswered = err
	}
	switch {
	case err == nil:
		t.Session = groupSettingOf(res[0], groupSessionKey, what, &t.problems)
		t.Interval = groupSettingOf(res[0], groupIntervalKey, what, &t.problems)
		return true
	case IsCode(err, kafka.ErrInvalidRequest):
		// Kafka before 4.0: no group resource, so no group sets its own.
		return true
	case IsCode(err, kafka.ErrGroupAuthorizationFailed):
		t.refused = t.errs.Refused("DescribeConfigs", "group", group, err)
	}
	t.problems = append(t.problems, fmt.Sprintf("%s: %v", what, err))
	return false
}

// or is s if it was read, else alt.
func (s BrokerSetting) or(alt BrokerSetting) BrokerSetting {
	if s.From != "" {
		return s
	}
	return alt
}

// groupSettingOf is settingOf for a GROUP resource: only a value set for the group counts.
func groupSettingOf(r kafka.ConfigResourceResult, key, what string, problems *[]string) BrokerSetting {
	if r.Config[key].Source != kafka.ConfigSourceGroup {
		return BrokerSetting{}
	}
	return settingOf(r, key, what, problems)
}

// settingOf reads a millisecond setting from a described resource. A setting that is missing or
// empty (kfake describes a group's settings that were never set without a value) is not read; one
// that does not parse is a problem.
func settingOf(r kafka.ConfigResourceResult, key, what string, problems *[]string) BrokerSetting {
	e, ok := r.Config[key]
	if !ok || strings.TrimSpace(e.Value) == "" {
		return BrokerSetting{}
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(e.Value), 10, 64)
	if err != nil || ms <= 0 {
		*problems = append(*problems, fmt.Sprintf("%s %s=%q is not a positive number of milliseconds", what, key, e.Value))
		return BrokerSetting{}
	}
	return BrokerSetting{Value: time.Duration(ms) * time.Millisecond, From: what + " " + key}
}

// SessionUnknownError refuses to lead on a KIP-848 session or group heartbeat interval that could
// not be known (see "Unknown means unknown"). It wraps the *AuthorizationError of a refused grant,
// if the broker refused one.
type SessionUnknownError struct {
	group   string
	lease   time.Duration
	what    string // "session timeout" or "group heartbeat interval"
	why     string
	Refused error
}

func (e *SessionUnknownError) Error() string {
	fix := "grant DescribeConfigs on the group and the cluster to the client's principal (docs/operations.md, ACLs)"
	if e.Refused != nil {
		fix = e.Refused.Error()
	}
	return fmt.Sprintf("goneli: cannot tell the %s that the broker applies to group %s under KIP-848 (%s), so cannot check that it "+
		"covers HeartbeatTimeout (%v): the group's own consumer.session.timeout.ms may be shorter than the brokers' default; %s",
		e.what, e.group, e.why, e.lease, fix)
}

// Unwrap returns the refused grant, if any.
func (e *SessionUnknownError) Unwrap() error {
	if e.Refused == nil {
		return nil
	}
	return e.Refused
}

// judge checks the timing against a lease of ht. It returns a warning for what could not be read
// but did not matter (empty if nothing), a *SessionUnknownError if the session or interval is not
// known, or the error (goneli.ConfigError) that refuses ht.
func (t ConsumerGroupTiming) Judge(group string, ht time.Duration) (warning string, err error) {
	why := "nothing answered"
	if len(t.problems) > 0 {
		why = strings.Join(t.problems, "; ")
	}
	if t.Session.From == "" {
		return "", &SessionUnknownError{group: group, lease: ht, what: "session timeout", why: why, Refused: t.refused}
	}
	// Without the interval, a session that not even a lease and the margin fit in is refused all the
	// same.
	margin := core.SessionMargin(ht)
	floor, need := ht+margin, fmt.Sprintf("HeartbeatTimeout + a margin for clock rates (%v + %v)", ht, margin)
	if t.Interval.From != "" {
		floor = ht + 2*t.Interval.Value + margin
		need = fmt.Sprintf("HeartbeatTimeout + 2 x the group heartbeat interval + a margin for clock rates (%v + 2 x %v (%s) + %v = %v)",
			ht, t.Interval.Value, t.Interval.From, margin, floor)
	}
	if t.Session.Value >= floor && t.Interval.From == "" {
		return "", &SessionUnknownError{group: group, lease: ht, what: "group heartbeat interval", why: why, Refused: t.refused}
	}
	if t.Session.Value < floor {
		advice := "raise the session timeout"
		if fits := maxLeaseFor(t.Session.Value, floor-ht-margin); fits >= core.MinHeartbeatTimeout {
			advice = fmt.Sprintf("lower HeartbeatTimeout to at most %v, or raise the session timeout", fits)
		}
		return "", t.errs.Config("HeartbeatTimeout", ht, fmt.Sprintf("unsafe with the broker's KIP-848 session for group %s: its session timeout, %v (%s), must be at least %s, "+
			"so that a leader cut off from Kafka fences itself before the coordinator can expel it; %s",
			group, t.Session.Value, t.Session.From, need, advice))
	}
	if len(t.problems) > 0 {
		return fmt.Sprintf("could not read everything of the KIP-848 session for group %s (%s); checked against what was read", group, why), nil
	}
	return "", nil
}

// checkConsumerGroupSession reads the broker's KIP-848 timing for the group and refuses a
// HeartbeatTimeout that its session does not cover, or a session that the broker refused to tell
// (see "Unknown means unknown"); what merely could not be read is logged, and no tenure leads
// until it can be. What was read replaces the client-side timing that the log line of New reports.
func (d *Driver) checkConsumerGroupSession(admin KafkaAdmin, brokers []int32) error {
	ht := *d.config.HeartbeatTimeout
	var t ConsumerGroupTiming
	if cd, ok := admin.(configDescriber); ok {
		t = timingRead{cd: cd, errs: d.config.Errors, group: d.config.LeaderGroupID, brokers: brokers, timeout: ht, kept: &d.check.timings}.read(context.Background())
	} else {
		t.problems = []string{"the KafkaAdmin cannot describe configs"}
	}
	warning, err := t.Judge(d.config.LeaderGroupID, ht)
	var unknown *SessionUnknownError
	switch {
	case errors.As(err, &unknown) && unknown.Refused == nil:
		d.log.W()("goneli %s: %v; no tenure leads until it can be read", d.config.Name, strings.TrimPrefix(err.Error(), "goneli: "))
		return nil
	case err != nil:
		return err
	case warning != "":
		d.log.W()("goneli %s: %s", d.config.Name, warning)
	}
	d.timing.BrokerSession, d.timing.BrokerInterval = t.Session.Value, t.Interval.Value
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
// connection, an admin client), nil under the classic protocol. A describer that cannot describe
// configs (a KafkaAdmin written for earlier versions) reads nothing, which the check takes for a
// session it cannot know.
func (d *Driver) sessionReader(desc GroupDescriber) func(context.Context) ConsumerGroupTiming {
	if d.timing.Classic {
		return nil
	}
	cd, ok := desc.(configDescriber)
	if !ok {
		return func(context.Context) ConsumerGroupTiming {
			return ConsumerGroupTiming{problems: []string{"the KafkaAdmin cannot describe configs"}, errs: d.config.Errors}
		}
	}
	ht := *d.config.HeartbeatTimeout
	r := timingRead{cd: cd, errs: d.config.Errors, group: d.config.LeaderGroupID, brokers: slices.Clone(d.brokers), timeout: ht, wait: timingWait(ht), kept: &d.check.timings}
	switch l := desc.(type) {
	case brokerLister:
		r.lister = l
	case metadataGetter:
		r.lister = adminBrokers{l, ht}
	}
	return r.read
}

// checkSessionAgain judges the KIP-848 session timing that a group check read beside its
// description. New checked it once, but an operator can lower a group's consumer.session.timeout.ms
// (Kafka 4.0) or the brokers' default while instances run, and a lease longer than the session no
// longer runs out before the coordinator can expel its holder: so every tenure, and every tenure
// that leads again after a fence, reads it again before it leads (lease.recheck), and does not lead
// while the session is too short for the lease (the check fails, and is retried like a failed
// one). What it reads also replaces the timing the window for explicit commits is measured with.
func (d *Driver) checkSessionAgain(t ConsumerGroupTiming) error {
	warning, err := t.Judge(d.config.LeaderGroupID, *d.config.HeartbeatTimeout)
	if err != nil {
		d.throttle.Log(d.log.E(), "session848", "goneli %s: not leading: %v", d.config.Name, err)
		return err
	}
	if warning != "" {
		d.throttle.Log(d.log.W(), "session848-read", "goneli %s: %s", d.config.Name, warning)
	}
	if t.Session.Value != d.timing.BrokerSession || t.Interval.Value != d.timing.BrokerInterval {
		d.log.I()("goneli %s: the broker's KIP-848 session for group %s is now %v (%s), group heartbeat %v (%s)",
			d.config.Name, d.config.LeaderGroupID, t.Session.Value, t.Session.From, t.Interval.Value, t.Interval.From)
		d.timing.BrokerSession, d.timing.BrokerInterval = t.Session.Value, t.Interval.Value
		d.machine(func(m *core.Machine) { m.UseTiming(d.timing) })
	}
	return nil
}
