package goneli

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
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
}

func (f *fakeConfigs) DescribeConfigs(_ context.Context, rs []kafka.ConfigResource, _ ...kafka.DescribeConfigsAdminOption) ([]kafka.ConfigResourceResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	var out []kafka.ConfigResourceResult
	invalid := f.noGroupResource && slices.ContainsFunc(rs, func(r kafka.ConfigResource) bool { return r.Type == kafka.ResourceGroup })
	for _, r := range rs {
		key := strings.ToLower(r.Type.String()) + " " + r.Name
		names = append(names, key)
		res := kafka.ConfigResourceResult{Type: r.Type, Name: r.Name, Config: map[string]kafka.ConfigEntryResult{}}
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
	}{
		{"broker session covers the lease", map[string]map[string]string{
			"group g": {groupSessionKey: "", groupIntervalKey: ""}, "broker 1": broker("10000", "100")}, nil, nil, "", false},
		{"broker session shorter than the lease", map[string]map[string]string{
			"group g": {groupSessionKey: ""}, "broker 1": broker("2000", "100")}, nil,
			[]string{"HeartbeatTimeout (3s)", "2s (broker \"1\" group.consumer.session.timeout.ms)", "3s + 2 x 100ms", "+ 150ms = 3.35s", "lower HeartbeatTimeout to at most 1.714s"}, "", false},
		// Issue 38: the session needs the same margin for clock rates as a derived classic session.
		{"no margin for clock rates", map[string]map[string]string{
			"group g": {}, "broker 1": broker("3200", "100")}, nil,
			[]string{"3s + 2 x 100ms (broker \"1\" group.consumer.heartbeat.interval.ms) + 150ms = 3.35s"}, "", false},
		{"no room for two heartbeat intervals", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "5000")}, nil,
			[]string{"10s (broker \"1\"", "3s + 2 x 5s (broker \"1\" group.consumer.heartbeat.interval.ms) + 150ms = 13.15s"}, "", false},
		{"the group's own session wins", map[string]map[string]string{
			"group g": {groupSessionKey: "2500", groupIntervalKey: "100"}, "broker 1": broker("45000", "100")}, nil,
			[]string{"2.5s (group \"g\" consumer.session.timeout.ms)"}, "", false},
		{"the group's own session covers", map[string]map[string]string{
			"group g": {groupSessionKey: "9000", groupIntervalKey: "1000"}, "broker 1": broker("2000", "100")}, nil, nil, "", false},
		{"the shortest broker session counts", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "100"), "broker 2": broker("3100", "100")}, nil,
			[]string{"3.1s (broker \"2\""}, "", false},
		{"the longest broker interval counts", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "100"), "broker 2": broker("10000", "4000")}, nil,
			[]string{"2 x 4s (broker \"2\""}, "", false},
		{"nothing can be read", nil, errors.New("no DescribeConfigs here"), nil, "could not read the session timeout that the broker applies to group g", false},
		{"no interval", map[string]map[string]string{"group g": {}, "broker 1": {brokerSessionKey: "10000"}}, nil, nil,
			"checked only that its session timeout, 10s (broker \"1\" group.consumer.session.timeout.ms), is at least HeartbeatTimeout (3s)", false},
		{"no interval, session shorter than the lease", map[string]map[string]string{"broker 1": {brokerSessionKey: "2000"}}, nil,
			[]string{"must be at least HeartbeatTimeout + a margin for clock rates (3s + 150ms)"}, "", false},
		{"a setting that does not parse", map[string]map[string]string{"group g": {}, "broker 1": broker("soon", "100")}, nil, nil,
			`broker "1" group.consumer.session.timeout.ms="soon" is not a positive number`, false},
		// Kafka 4.0 describes a group's unset settings with the answering broker's defaults, which
		// need not be the coordinator's: the bound over every broker decides.
		{"the group resource's defaults do not count", map[string]map[string]string{
			"group g": {groupSessionKey: "default:45000", groupIntervalKey: "default:100"}, "broker 1": broker("2000", "100")}, nil,
			[]string{"2s (broker \"1\" group.consumer.session.timeout.ms)"}, "", false},
		// Kafka 3.7-3.9: a request that names the group would lose the broker's answer with it.
		{"no group resource", map[string]map[string]string{
			"group g": {groupSessionKey: "45000"}, "broker 1": broker("2000", "100")}, nil,
			[]string{"2s (broker \"1\" group.consumer.session.timeout.ms)"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeConfigs{settings: tc.settings, err: tc.err, noGroupResource: tc.noGroup}
			brokers := []int32{1}
			if _, ok := tc.settings["broker 2"]; ok {
				brokers = []int32{2, 1}
			}
			warning, err := readConsumerGroupTiming(context.Background(), f, "g", brokers, time.Second).judge("g", lease)
			var ce *ConfigError
			switch {
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
	readConsumerGroupTiming(context.Background(), f, "g", []int32{3, 1, 2}, time.Second)
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
