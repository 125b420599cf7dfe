package goneli

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// fakeConfigs answers DescribeConfigs from fixed settings per resource, or with err.
type fakeConfigs struct {
	mu       sync.Mutex
	settings map[string]map[string]string // by "group g" or "broker 1"
	err      error
	asked    [][]string
}

func (f *fakeConfigs) DescribeConfigs(_ context.Context, rs []kafka.ConfigResource, _ ...kafka.DescribeConfigsAdminOption) ([]kafka.ConfigResourceResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	var out []kafka.ConfigResourceResult
	for _, r := range rs {
		key := strings.ToLower(r.Type.String()) + " " + r.Name
		names = append(names, key)
		res := kafka.ConfigResourceResult{Type: r.Type, Name: r.Name, Config: map[string]kafka.ConfigEntryResult{}}
		settings, ok := f.settings[key]
		if !ok {
			res.Error = kafka.NewError(kafka.ErrInvalidRequest, "unknown resource", false)
		}
		for k, v := range settings {
			res.Config[k] = kafka.ConfigEntryResult{Name: k, Value: v}
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
	}{
		{"broker session covers the lease", map[string]map[string]string{
			"group g": {groupSessionKey: "", groupIntervalKey: ""}, "broker 1": broker("10000", "100")}, nil, nil, ""},
		{"broker session shorter than the lease", map[string]map[string]string{
			"group g": {groupSessionKey: ""}, "broker 1": broker("2000", "100")}, nil,
			[]string{"HeartbeatTimeout (3s)", "2s (broker \"1\" group.consumer.session.timeout.ms)", "3s + 2 x 100ms", "= 3.2s", "raise the session timeout"}, ""},
		{"no room for two heartbeat intervals", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "5000")}, nil,
			[]string{"10s (broker \"1\"", "3s + 2 x 5s (broker \"1\" group.consumer.heartbeat.interval.ms) = 13s"}, ""},
		{"the group's own session wins", map[string]map[string]string{
			"group g": {groupSessionKey: "2500", groupIntervalKey: "100"}, "broker 1": broker("45000", "100")}, nil,
			[]string{"2.5s (group \"g\" consumer.session.timeout.ms)"}, ""},
		{"the group's own session covers", map[string]map[string]string{
			"group g": {groupSessionKey: "9000", groupIntervalKey: "1000"}, "broker 1": broker("2000", "100")}, nil, nil, ""},
		{"the shortest broker session counts", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "100"), "broker 2": broker("3100", "100")}, nil,
			[]string{"3.1s (broker \"2\""}, ""},
		{"the longest broker interval counts", map[string]map[string]string{
			"group g": {}, "broker 1": broker("10000", "100"), "broker 2": broker("10000", "4000")}, nil,
			[]string{"2 x 4s (broker \"2\""}, ""},
		{"nothing can be read", nil, errors.New("no DescribeConfigs here"), nil, "could not read the session timeout that the broker applies to group g"},
		{"no interval", map[string]map[string]string{"group g": {}, "broker 1": {brokerSessionKey: "10000"}}, nil, nil,
			"checked only that its session timeout, 10s (broker \"1\" group.consumer.session.timeout.ms), is at least HeartbeatTimeout (3s)"},
		{"no interval, session shorter than the lease", map[string]map[string]string{"broker 1": {brokerSessionKey: "2000"}}, nil,
			[]string{"must be at least HeartbeatTimeout (3s)"}, ""},
		{"a setting that does not parse", map[string]map[string]string{"group g": {}, "broker 1": broker("soon", "100")}, nil, nil,
			`broker "1" group.consumer.session.timeout.ms="soon" is not a positive number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeConfigs{settings: tc.settings, err: tc.err}
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

// The group's resource goes with the first broker's; each broker's goes on a request of its own,
// as librdkafka takes one broker resource per request.
func TestConsumerGroupTimingRequests(t *testing.T) {
	f := &fakeConfigs{settings: map[string]map[string]string{}}
	readConsumerGroupTiming(context.Background(), f, "g", []int32{3, 1, 2}, time.Second)
	got := map[string]bool{}
	for _, req := range f.asked {
		got[strings.Join(req, ",")] = true
	}
	for _, want := range []string{"group g,broker 1", "broker 2", "broker 3"} {
		if !got[want] || len(got) != 3 {
			t.Fatalf("requests %v, want %q among three", f.asked, want)
		}
	}
}
