package driver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// fakeConfigs answers DescribeConfigs from fixed settings per resource, or with err. A group's
// settings have the source GROUP_CONFIG, as a value set for the group has, unless the value starts
// with "default:", as the answering broker's defaults come (ConfigHelper.createGroupConfigEntry).
type fakeConfigs struct {
	mu       sync.Mutex
	settings map[string]map[string]string // by "group g" or "broker 1"
	err      error
	asked    [][]string
	// noGroupResource answers as Kafka 3.7-3.9 do a request that names a GROUP resource, which
	// they do not know: INVALID_REQUEST for every resource of the request.
	noGroupResource bool
	// refused answers a resource with the error, as Kafka does one the principal may not describe
	// (GROUP_AUTHORIZATION_FAILED for a group, CLUSTER_AUTHORIZATION_FAILED for a broker).
	refused map[string]kafka.ErrorCode
	// silent resources are not answered: the request waits for its context to end, and the
	// deadline it had is noted in waited.
	silent map[string]bool
	waited map[string]time.Duration
}

func (f *fakeConfigs) DescribeConfigs(ctx context.Context, rs []kafka.ConfigResource, _ ...kafka.DescribeConfigsAdminOption) ([]kafka.ConfigResourceResult, error) {
	for _, r := range rs {
		key := strings.ToLower(r.Type.String()) + " " + r.Name
		if f.silent[key] {
			deadline, _ := ctx.Deadline()
			start := time.Now()
			<-ctx.Done()
			f.mu.Lock()
			if f.waited == nil {
				f.waited = map[string]time.Duration{}
			}
			f.waited[key] = deadline.Sub(start)
			f.mu.Unlock()
			return nil, kafka.NewError(kafka.ErrTimedOut, ctx.Err().Error(), false)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	var out []kafka.ConfigResourceResult
	invalid := f.noGroupResource && slices.ContainsFunc(rs, func(r kafka.ConfigResource) bool { return r.Type == kafka.ResourceGroup })
	for _, r := range rs {
		key := strings.ToLower(r.Type.String()) + " " + r.Name
		names = append(names, key)
		res := kafka.ConfigResourceResult{Type: r.Type, Name: r.Name, Config: map[string]kafka.ConfigEntryResult{}}
		if code, ok := f.refused[key]; ok {
			res.Error = kafka.NewError(code, "refused", false)
			out = append(out, res)
			continue
		}
		settings, ok := f.settings[key]
		if !ok || invalid {
			res.Error = kafka.NewError(kafka.ErrInvalidRequest, "unknown resource", false)
			out = append(out, res)
			continue
		}
		for k, v := range settings {
			e := kafka.ConfigEntryResult{Name: k, Value: v}
			if r.Type == kafka.ResourceGroup {
				e.Source = kafka.ConfigSourceGroup
				if d, ok := strings.CutPrefix(v, "default:"); ok {
					e.Value, e.Source = d, kafka.ConfigSourceDefault
				}
			}
			res.Config[k] = e
		}
		out = append(out, res)
	}
	f.asked = append(f.asked, names)
	if f.err != nil {
		return nil, f.err
	}
	return out, nil
}

// The group's own settings win; else the smallest session and the largest interval of the
// brokers; the lease must fit in the session with two intervals to spare.
func TestConsumerGroupTiming(t *testing.T) {
	const lease = 3 * time.Second
	broker := func(session, interval string) map[string]string {
		return map[string]string{brokerSessionKey: session, brokerIntervalKey: interval}
	}
	for _, tc := range []struct {
		name     string
		settings map[string]map[string]string
		err      error
		refused  []string // in the error; nil if accepted
		warning  string   // in the warning; empty if none
		// noGroup: the broker knows no GROUP resource (Kafka 3.7-3.9).
		noGroup bool
		// unknown: the session or interval cannot be known, and the error says so (with
		// unknownGrant, the grant the broker refused, or "" for none).
		unknown, unknownGrant string
		denied                map[string]kafka.ErrorCode
	}{
		{"broker session covers the lease", map[string]map[string]string{
			"group g": {groupSessionKey: "", groupIntervalKey: ""}, "broker 1": broker("10000", "100")}, nil, nil, "", false, "", "", nil},
		{"broker session shorter than the lease", map[string]map[string]string{
			"group g": {groupSessionKey: ""}, "broker 1": broker("2000", "100")}, nil,
			[]string{"HeartbeatTimeout (3s)", "2s (broker \"1\" group.consumer.session.timeout.ms)", "3s + 2 x 100ms", "+ 150ms = 3.35s", "lower HeartbeatTimeout to at most 1.714s"}, "", false, "", "", nil},
		// Issue 38: the session needs the same margin for clock rates as a derived classic session.
		{"no margin for clock rates", map[string]map[string]string{
			"group g": {}, "broker 1": broker("3200", "100")}, nil,
			[]string{"3s + 2 x 100ms (broker \"1\" group.consumer.heartbeat.interval.ms) + 150ms = 3.35s"}, "", false, "", "", nil},
		{"no room for two heartbeat intervals", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "5000")}, nil,
			[]string{"10s (broker \"1\"", "3s + 2 x 5s (broker \"1\" group.consumer.heartbeat.interval.ms) + 150ms = 13.15s"}, "", false, "", "", nil},
		{"the group's own session wins", map[string]map[string]string{
			"group g": {groupSessionKey: "2500", groupIntervalKey: "100"}, "broker 1": broker("45000", "100")}, nil,
			[]string{"2.5s (group \"g\" consumer.session.timeout.ms)"}, "", false, "", "", nil},
		{"the group's own session covers", map[string]map[string]string{
			"group g": {groupSessionKey: "9000", groupIntervalKey: "1000"}, "broker 1": broker("2000", "100")}, nil, nil, "", false, "", "", nil},
		{"the shortest broker session counts", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "100"), "broker 2": broker("3100", "100")}, nil,
			[]string{"3.1s (broker \"2\""}, "", false, "", "", nil},
		{"the longest broker interval counts", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "100"), "broker 2": broker("10000", "4000")}, nil,
			[]string{"2 x 4s (broker \"2\""}, "", false, "", "", nil},
		// Issue 46: unknown means unknown, never "go on with a warning".
		{name: "nothing can be read", err: errors.New("no DescribeConfigs here"), unknown: "cannot tell the session timeout"},
		{name: "no interval", settings: map[string]map[string]string{"group g": {}, "broker 1": {brokerSessionKey: "10000"}},
			unknown: "cannot tell the group heartbeat interval"},
		{"no interval, session shorter than the lease", map[string]map[string]string{"broker 1": {brokerSessionKey: "2000"}}, nil,
			[]string{"must be at least HeartbeatTimeout + a margin for clock rates (3s + 150ms)"}, "", false, "", "", nil},
		{name: "a setting that does not parse", settings: map[string]map[string]string{"group g": {}, "broker 1": broker("soon", "100")},
			unknown: `broker "1" group.consumer.session.timeout.ms="soon" is not a positive number`},
		// Issue 46 C2: a group resource the principal may not describe leaves the group's own
		// session unknown, however long the brokers' default: a 3 s lease must not pass against 45 s.
		{name: "the group's resource refused", settings: map[string]map[string]string{"broker 1": broker("45000", "100")},
			denied:  map[string]kafka.ErrorCode{"group g": kafka.ErrGroupAuthorizationFailed},
			unknown: "cannot tell the session timeout", unknownGrant: "DescribeConfigs on group g"},
		{name: "the brokers' resources refused, the group sets none", settings: map[string]map[string]string{"group g": {}},
			denied:  map[string]kafka.ErrorCode{"broker 1": kafka.ErrClusterAuthorizationFailed},
			unknown: "cannot tell the session timeout", unknownGrant: "DescribeConfigs on cluster"},
		{name: "the brokers' resources refused, the group sets both", settings: map[string]map[string]string{
			"group g": {groupSessionKey: "9000", groupIntervalKey: "1000"}},
			denied: map[string]kafka.ErrorCode{"broker 1": kafka.ErrClusterAuthorizationFailed}, warning: "could not read everything"},
		// Kafka 4.0 describes a group's unset settings with the answering broker's defaults, which
		// need not be the coordinator's: the bound over every broker decides.
		{"the group resource's defaults do not count", map[string]map[string]string{
			"group g": {groupSessionKey: "default:45000", groupIntervalKey: "default:100"}, "broker 1": broker("2000", "100")}, nil,
			[]string{"2s (broker \"1\" group.consumer.session.timeout.ms)"}, "", false, "", "", nil},
		// Kafka 3.7-3.9: a request that names the group would lose the broker's answer with it.
		{"no group resource", map[string]map[string]string{
			"group g": {groupSessionKey: "45000"}, "broker 1": broker("2000", "100")}, nil,
			[]string{"2s (broker \"1\" group.consumer.session.timeout.ms)"}, "", true, "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeConfigs{settings: tc.settings, err: tc.err, noGroupResource: tc.noGroup, refused: tc.denied}
			brokers := []int32{1}
			if _, ok := tc.settings["broker 2"]; ok {
				brokers = []int32{2, 1}
			}
			warning, err := ReadConsumerGroupTiming(context.Background(), f, testErrors{}, "g", brokers, time.Second).Judge("g", lease)
			var ce *apiError
			var unknown *SessionUnknownError
			var refused *apiError
			switch {
			case tc.unknown != "":
				if !errors.As(err, &unknown) || !strings.Contains(err.Error(), tc.unknown) {
					t.Fatalf("got %v, want a sessionUnknownError saying %q", err, tc.unknown)
				}
				if got := errors.As(err, &refused); got != (tc.unknownGrant != "") ||
					got && !strings.Contains(refused.Operation+" on "+refused.Resource+" "+refused.Name, tc.unknownGrant) {
					t.Fatalf("got %v, want the refused grant %q (empty: none)", err, tc.unknownGrant)
				}
				return
			case tc.refused == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != nil && (!errors.As(err, &ce) || ce.Field != "HeartbeatTimeout"):
				t.Fatalf("got %v, want a ConfigError for HeartbeatTimeout", err)
			}
			for _, want := range tc.refused {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if (tc.warning == "") != (warning == "") || !strings.Contains(warning, tc.warning) {
				t.Errorf("warning %q, want one saying %q", warning, tc.warning)
			}
		})
	}
}

// The group's resource goes alone, so that a broker that does not know the resource type (Kafka
// 3.7-3.9) still answers for itself; each broker's goes on a request of its own, as librdkafka
// takes one broker resource per request.
func TestConsumerGroupTimingRequests(t *testing.T) {
	f := &fakeConfigs{settings: map[string]map[string]string{}}
	ReadConsumerGroupTiming(context.Background(), f, testErrors{}, "g", []int32{3, 1, 2}, time.Second)
	got := map[string]bool{}
	for _, req := range f.asked {
		got[strings.Join(req, ",")] = true
	}
	for _, want := range []string{"group g", "broker 1", "broker 2", "broker 3"} {
		if !got[want] || len(got) != 4 {
			t.Fatalf("requests %v, want %q among four", f.asked, want)
		}
	}
}

// Issue 46 C3: a tenure's check waits for a broker it has asked before only timingWait, and one
// that does not answer by then counts with its last answer, so that a broker cut off from the
// instance costs a new leader a tenth of a lease rather than a lease. A broker never asked is
// waited for in full, as there is nothing to count it with; the group's own resource is read
// afresh every time.
func TestConsumerGroupTimingWaitsLittleForABrokerAskedBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease, wait = 3 * time.Second, 300 * time.Millisecond
		f := &fakeConfigs{settings: map[string]map[string]string{
			"group g": {}, "broker 1": {brokerSessionKey: "10000", brokerIntervalKey: "100"}, "broker 2": {brokerSessionKey: "5000", brokerIntervalKey: "100"}}}
		var kept brokerTimings
		read := func() ConsumerGroupTiming {
			return timingRead{cd: f, errs: testErrors{}, group: "g", brokers: []int32{1, 2}, timeout: lease, wait: wait, kept: &kept}.read(context.Background())
		}
		if got := read(); got.Session.Value != 5*time.Second {
			t.Fatalf("first read: session %v, want broker 2's 5s", got.Session.Value)
		}
		f.silent = map[string]bool{"broker 2": true}
		got := read()
		if got.Session.Value != 5*time.Second || !strings.Contains(strings.Join(got.problems, "; "), "its last answer counts") {
			t.Fatalf("broker 2 silent: session %v (%v), want its last answer, 5s", got.Session.Value, got.problems)
		}
		if f.waited["broker 2"] != wait {
			t.Errorf("waited %v for broker 2, which answered before; want %v", f.waited["broker 2"], wait)
		}
		f.silent = map[string]bool{"broker 3": true}
		timingRead{cd: f, errs: testErrors{}, group: "g", brokers: []int32{1, 2, 3}, timeout: lease, wait: wait, kept: &kept}.read(context.Background())
		if f.waited["broker 3"] != lease+time.Second {
			t.Errorf("waited %v for broker 3, never asked before; want the whole bound, %v", f.waited["broker 3"], lease+time.Second)
		}
		f.settings["group g"] = map[string]string{groupSessionKey: "4000", groupIntervalKey: "200"}
		if got := read(); got.Session.Value != 4*time.Second || got.Interval.Value != 200*time.Millisecond {
			t.Errorf("the group's settings changed: read %v and %v, want 4s and 200ms", got.Session.Value, got.Interval.Value)
		}
	})
}
