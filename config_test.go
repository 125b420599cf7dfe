package goneli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/driver"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func validConfig() Config {
	c := Config{KafkaConfig: KafkaConfigMap{}, LeaderGroupID: "g", Name: "n"}
	c.SetDefaults()
	return c
}

func TestSetDefaults(t *testing.T) {
	var c Config
	c.SetDefaults()
	if c.KafkaConfig["bootstrap.servers"] != DefaultBootstrapServers {
		t.Errorf("bootstrap.servers = %v", c.KafkaConfig["bootstrap.servers"])
	}
	if c.LeaderGroupID == "" || c.LeaderTopic != c.LeaderGroupID+".neli" {
		t.Errorf("LeaderGroupID %q, LeaderTopic %q", c.LeaderGroupID, c.LeaderTopic)
	}
	if *c.PollDuration != DefaultPollDuration || *c.MinPollInterval != DefaultMinPollInterval || *c.HeartbeatTimeout != DefaultHeartbeatTimeout {
		t.Errorf("durations %v %v %v", *c.PollDuration, *c.MinPollInterval, *c.HeartbeatTimeout)
	}
	if c.Name == "" || c.Scribe == nil || c.KafkaConsumerProvider == nil || c.KafkaProducerProvider == nil || c.KafkaAdminProvider == nil {
		t.Error("a default is missing")
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

// A group left to its default is named after the program, which deserves a warning, since two
// programs of the same name would share it unknowingly.
func TestDefaultGroupIsWarnedAbout(t *testing.T) {
	for _, group := range []string{"", "chosen"} {
		log := newTestLog(t)
		if _, _, err := (Config{LeaderGroupID: group, Scribe: log.Scribe()}).prepare(); err != nil {
			t.Fatal(err)
		}
		if warned := log.Contains("no LeaderGroupID given"); warned != (group == "") {
			t.Errorf("LeaderGroupID %q: warned %v", group, warned)
		}
	}
}

func TestRenewIntervalDefault(t *testing.T) {
	for _, tc := range []struct {
		lease, poll, want time.Duration
	}{
		{DefaultHeartbeatTimeout, 0, 500 * time.Millisecond},
		{time.Second, 0, 100 * time.Millisecond},
		{MinHeartbeatTimeout, 0, 50 * time.Millisecond},
		{DefaultHeartbeatTimeout, time.Second, time.Second}, // never faster than the polls that produce heartbeats
	} {
		c := Config{HeartbeatTimeout: Duration(tc.lease)}
		if tc.poll != 0 {
			c.MinPollInterval = Duration(tc.poll)
		}
		c.SetDefaults()
		if *c.RenewInterval != tc.want {
			t.Errorf("lease %v, MinPollInterval %v: RenewInterval %v, want %v", tc.lease, *c.MinPollInterval, *c.RenewInterval, tc.want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("lease %v: defaults do not validate: %v", tc.lease, err)
		}
		timing, _ := c.groupTiming()
		consumer, _, _ := c.clientConfigs(timing)
		if wait := time.Duration(consumer["fetch.wait.max.ms"].(int)) * time.Millisecond; wait != core.ClampDuration(2*tc.want, 100*time.Millisecond, time.Second) {
			t.Errorf("lease %v: fetch.wait.max.ms %v, want twice the renewal interval within 100ms to 1s", tc.lease, wait)
		}
	}
}

// The default MinPollInterval and RenewInterval keep the renewal lag bound at every lease.
func TestDefaultsKeepTheRenewalLagBound(t *testing.T) {
	for lease := MinHeartbeatTimeout; lease <= 2*time.Minute; lease += lease / 7 {
		c := validConfig()
		c.HeartbeatTimeout, c.MinPollInterval, c.RenewInterval = Duration(lease), nil, nil
		c.SetDefaults()
		if err := c.Validate(); err != nil {
			t.Errorf("lease %v: the defaults do not validate: %v", lease, err)
		}
	}
}

// The fetch wait goneli derives stays within what Validate allows a user: at most a third of the
// lease, even where twice the renewal interval is more.
func TestDerivedFetchWaitFitsTheLease(t *testing.T) {
	c := validConfig()
	c.HeartbeatTimeout, c.RenewInterval = Duration(1500*time.Millisecond), Duration(500*time.Millisecond)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	timing, _ := c.groupTiming()
	consumer, _, _ := c.clientConfigs(timing)
	if wait := consumer["fetch.wait.max.ms"]; wait != 500 {
		t.Errorf("fetch.wait.max.ms = %v, want 500 (HeartbeatTimeout/3)", wait)
	}
}

func TestMinPollIntervalFollowsShortLeases(t *testing.T) {
	c := Config{HeartbeatTimeout: Duration(time.Second)}
	c.SetDefaults()
	if *c.MinPollInterval != 50*time.Millisecond {
		t.Fatalf("MinPollInterval for a 1s lease = %v, want 50ms", *c.MinPollInterval)
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		field  string
		reason string
	}{
		{"nil KafkaConfig", func(c *Config) { c.KafkaConfig = nil }, "KafkaConfig", "must be set"},
		{"group.id", func(c *Config) { c.KafkaConfig["group.id"] = "x" }, `KafkaConfig["group.id"]`, "LeaderGroupID"},
		{"enable.auto.commit", func(c *Config) { c.KafkaConfig["enable.auto.commit"] = false }, `KafkaConfig["enable.auto.commit"]`, "must not be set"},
		{"enable.auto.offset.store", func(c *Config) { c.KafkaConfig["enable.auto.offset.store"] = true }, `KafkaConfig["enable.auto.offset.store"]`, "must not be set"},
		{"auto.commit.interval.ms", func(c *Config) { c.KafkaConfig["auto.commit.interval.ms"] = 5 }, `KafkaConfig["auto.commit.interval.ms"]`, "MinPollInterval"},
		{"enable.partition.eof", func(c *Config) { c.KafkaConfig["enable.partition.eof"] = true }, `KafkaConfig["enable.partition.eof"]`, "must not be set"},
		{"rebalance channel", func(c *Config) { c.KafkaConfig["go.application.rebalance.enable"] = true }, `KafkaConfig["go.application.rebalance.enable"]`, "must not be set"},
		{"events channel", func(c *Config) { c.KafkaConfig["go.events.channel.enable"] = true }, `KafkaConfig["go.events.channel.enable"]`, "must not be set"},
		{"logs channel", func(c *Config) { c.KafkaConfig["go.logs.channel"] = make(chan kafka.LogEvent) }, `KafkaConfig["go.logs.channel"]`, "must not be set"},
		{"logs forwarding", func(c *Config) { c.KafkaConfig["go.logs.channel.enable"] = "yes" }, `KafkaConfig["go.logs.channel.enable"]`, "must be true or false"},
		{"empty group", func(c *Config) { c.LeaderGroupID = "" }, "LeaderGroupID", "must not be empty"},
		{"empty topic", func(c *Config) { c.LeaderTopic = "" }, "LeaderTopic", "must not be empty"},
		{"bad topic", func(c *Config) { c.LeaderTopic = "a/b" }, "LeaderTopic", "[a-zA-Z0-9._-]"},
		{"group that cannot name the topic", func(c *Config) { c.LeaderGroupID, c.LeaderTopic = "my group", "my group.neli" }, "LeaderTopic", "the default, LeaderGroupID + \".neli\", is not, so set LeaderTopic"},
		{"dot topic", func(c *Config) { c.LeaderTopic = ".." }, "LeaderTopic", "not '.' or '..'"},
		{"long topic", func(c *Config) { c.LeaderTopic = strings.Repeat("t", 250) }, "LeaderTopic", "1 to 249"},
		{"consumer provider", func(c *Config) { c.KafkaConsumerProvider = nil }, "KafkaConsumerProvider", "must be set"},
		{"producer provider", func(c *Config) { c.KafkaProducerProvider = nil }, "KafkaProducerProvider", "must be set"},
		{"admin provider", func(c *Config) { c.KafkaAdminProvider = nil }, "KafkaAdminProvider", "must be set"},
		{"scribe", func(c *Config) { c.Scribe = nil }, "Scribe", "must be set"},
		{"name", func(c *Config) { c.Name = "" }, "Name", "must not be empty"},
		{"nil poll duration", func(c *Config) { c.PollDuration = nil }, "PollDuration", "must be set"},
		{"negative poll duration", func(c *Config) { c.PollDuration = Duration(-1) }, "PollDuration", "must not be negative"},
		{"long poll duration", func(c *Config) { c.PollDuration = Duration(time.Second) }, "PollDuration", "at most MinPollInterval (100ms)"},
		{"static membership", func(c *Config) { c.KafkaConfig["group.instance.id"] = "pod-0" }, `KafkaConfig["group.instance.id"]`, "two instances would lead"},
		{"long address", func(c *Config) { c.Address = strings.Repeat("a", MaxAddressLength+1) }, "Address", "at most 1024 bytes (it is 1025)"},
		{"nil min poll", func(c *Config) { c.MinPollInterval = nil }, "MinPollInterval", "must be set"},
		{"tiny min poll", func(c *Config) { c.MinPollInterval = Duration(time.Microsecond) }, "MinPollInterval", "at least 1ms"},
		{"nil heartbeat timeout", func(c *Config) { c.HeartbeatTimeout = nil }, "HeartbeatTimeout", "must be set"},
		{"short heartbeat timeout", func(c *Config) { c.HeartbeatTimeout = Duration(100 * time.Millisecond) }, "HeartbeatTimeout", "at least 500ms"},
		{"long heartbeat timeout", func(c *Config) { c.HeartbeatTimeout = Duration(time.Hour) }, "HeartbeatTimeout", "at most 30m0s"},
		{"lease vs poll", func(c *Config) { c.MinPollInterval = Duration(2 * time.Second) }, "HeartbeatTimeout", "3 x MinPollInterval"},
		{"nil renew interval", func(c *Config) { c.RenewInterval = nil }, "RenewInterval", "must be set"},
		{"hasty hand-over", func(c *Config) { c.HandOverAfter = Duration(2 * time.Second) }, "HandOverAfter", "at least HeartbeatTimeout/2 (2.5s)"},
		{"renewal faster than polls", func(c *Config) { c.RenewInterval = Duration(50 * time.Millisecond) }, "RenewInterval", "at least MinPollInterval (100ms)"},
		{"renewal too rare", func(c *Config) { c.RenewInterval = Duration(2 * time.Second) }, "RenewInterval", "at most HeartbeatTimeout/3"},
		// Renewals take effect RenewInterval + 2 x MinPollInterval apart, which these leases do not
		// outlast: a healthy leader was fenced at nearly every renewal.
		{"renewal lag 1.5s/500ms", func(c *Config) {
			c.HeartbeatTimeout, c.MinPollInterval, c.RenewInterval = Duration(1500*time.Millisecond), Duration(500*time.Millisecond), Duration(500*time.Millisecond)
		},
			"HeartbeatTimeout", "MinPollInterval 500ms and RenewInterval 500ms: must be at least 2 x RenewInterval + 2 x MinPollInterval (2s)"},
		{"renewal lag 3s/1s", func(c *Config) {
			c.HeartbeatTimeout, c.MinPollInterval, c.RenewInterval = Duration(3*time.Second), Duration(time.Second), Duration(time.Second)
		},
			"HeartbeatTimeout", "(4s)"},
		// Heartbeats go out on polls, so a RenewInterval of 600ms with polls every 500ms renews every second.
		{"renewal lag, renewals between polls", func(c *Config) {
			c.HeartbeatTimeout, c.MinPollInterval, c.RenewInterval = Duration(2500*time.Millisecond), Duration(500*time.Millisecond), Duration(600*time.Millisecond)
		},
			"HeartbeatTimeout", "RenewInterval 600ms (1s, as heartbeats go out on polls)"},
		{"unsafe session", func(c *Config) { c.KafkaConfig["session.timeout.ms"] = 5500 }, `KafkaConfig["session.timeout.ms"]`, "at least HeartbeatTimeout + 2 x heartbeat.interval.ms (6000)"},
		{"unsafe interval", func(c *Config) { c.KafkaConfig["heartbeat.interval.ms"] = "3000" }, `KafkaConfig["heartbeat.interval.ms"]`, "(11000)"},
		{"session not a number", func(c *Config) { c.KafkaConfig["session.timeout.ms"] = "soon" }, `KafkaConfig["session.timeout.ms"]`, "whole number"},
		{"session wrong type", func(c *Config) { c.KafkaConfig["session.timeout.ms"] = 1.5 }, `KafkaConfig["session.timeout.ms"]`, "int or a string"},
		{"session not positive", func(c *Config) { c.KafkaConfig["session.timeout.ms"] = 0 }, `KafkaConfig["session.timeout.ms"]`, "positive"},
		{"empty bootstrap.servers", func(c *Config) { c.KafkaConfig["bootstrap.servers"] = "" }, `KafkaConfig["bootstrap.servers"]`, "must not be empty"},
		{"blank bootstrap.servers", func(c *Config) { c.KafkaConfig["bootstrap.servers"] = " , " }, `KafkaConfig["bootstrap.servers"]`, "leave it unset for " + DefaultBootstrapServers},
		// Client settings that New accepted and that then broke the protocol.
		{"transactional producer", func(c *Config) { c.KafkaConfig["transactional.id"] = "tx" }, `KafkaConfig["transactional.id"]`, "must not be set: the heartbeat producer"},
		{"offsets in a file", func(c *Config) { c.KafkaConfig["offset.store.method"] = "file" }, `KafkaConfig["offset.store.method"]`, `must be "broker" or unset`},
		{"large fetch.min.bytes", func(c *Config) { c.KafkaConfig["fetch.min.bytes"] = 100000 }, `KafkaConfig["fetch.min.bytes"]`, "must be 1 or unset"},
		{"fetch.min.bytes not a number", func(c *Config) { c.KafkaConfig["fetch.min.bytes"] = "lots" }, `KafkaConfig["fetch.min.bytes"]`, "whole number"},
		{"long fetch wait", func(c *Config) { c.KafkaConfig["fetch.wait.max.ms"] = "3000" }, `KafkaConfig["fetch.wait.max.ms"]`, "at most HeartbeatTimeout/3 (1666)"},
		{"fetch wait not a number", func(c *Config) { c.KafkaConfig["fetch.wait.max.ms"] = 2.5 }, `KafkaConfig["fetch.wait.max.ms"]`, "int or a string"},
		{"max poll below session", func(c *Config) { c.KafkaConfig["max.poll.interval.ms"] = 6000 }, `KafkaConfig["max.poll.interval.ms"]`, "at least 6250"},
		{"priority too high", func(c *Config) { c.Priority = 1000 }, "Priority", "must be -999 to 999"},
		{"priority too low", func(c *Config) { c.Priority = -1000 }, "Priority", "must be -999 to 999"},
		{"priority with own client.id", func(c *Config) { c.Priority, c.KafkaConfig["client.id"] = 2, "billing" }, "Priority", `client.id "billing" is set`},
		{"name that reads as a priority", func(c *Config) { c.Name = "-001-x" }, "Name", "reads as priority 999"},
		{"name that reads as a negative priority", func(c *Config) { c.Name = "zz003-x" }, "Name", "reads as priority -3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(&c)
			err := c.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("want a *ConfigError, got %v", err)
			}
			if ce.Field != tc.field {
				t.Errorf("field = %s, want %s (error: %v)", ce.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.reason) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q should name %s and say %q", err, tc.field, tc.reason)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.Name, c.LeaderGroupID = "", ""
	err := c.Validate()
	for _, field := range []string{"Name", "LeaderGroupID"} {
		if !strings.Contains(err.Error(), "invalid "+field) {
			t.Errorf("%q does not report %s", err, field)
		}
	}
}

func TestSafeOverridesAreAccepted(t *testing.T) {
	c := validConfig()
	c.KafkaConfig["session.timeout.ms"] = "30000"
	c.KafkaConfig["heartbeat.interval.ms"] = 1000
	c.KafkaConfig["max.poll.interval.ms"] = int64(60000)
	c.KafkaConfig["offset.store.method"] = "broker"
	c.KafkaConfig["fetch.min.bytes"] = "1"
	c.KafkaConfig["fetch.wait.max.ms"] = 1666
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	timing, _ := c.groupTiming()
	consumer, producer, admin := c.clientConfigs(timing)
	for key, want := range map[string]interface{}{"session.timeout.ms": 30000, "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 60000, "group.id": "g", "fetch.wait.max.ms": 1666} {
		if consumer[key] != want {
			t.Errorf("consumer %s = %v, want %v", key, consumer[key], want)
		}
	}
	for _, key := range []string{"session.timeout.ms", "group.id", "enable.auto.commit"} {
		if _, ok := producer[key]; ok {
			t.Errorf("producer config carries consumer setting %s", key)
		}
	}
	if _, ok := admin["acks"]; ok {
		t.Error("admin config carries producer setting acks")
	}
}

// librdkafka's auto-commit timer runs on a period that does not divide the poll interval, so that
// goneli's cycles do not keep one phase of it (autoCommitInterval).
func TestAutoCommitIntervalIsNotCommensurateWithThePoll(t *testing.T) {
	for _, tc := range []struct{ poll, want time.Duration }{
		{100 * time.Millisecond, 26 * time.Millisecond},
		{50 * time.Millisecond, 12 * time.Millisecond},
		{40 * time.Millisecond, 11 * time.Millisecond},
		{25 * time.Millisecond, 10 * time.Millisecond},
		{time.Millisecond, 10 * time.Millisecond},
		{4 * time.Second, 1001 * time.Millisecond},
	} {
		got := core.AutoCommitInterval(tc.poll)
		if got != tc.want {
			t.Errorf("poll %v: auto.commit.interval.ms %v, want %v", tc.poll, got, tc.want)
		}
		if tc.poll%got == 0 {
			t.Errorf("poll %v: the tick %v divides it", tc.poll, got)
		}
	}
}

func TestDerivedGroupTiming(t *testing.T) {
	// The session is the lease, two group heartbeat intervals and a twentieth of the lease (at
	// least 50 ms), and at least a second; the rebalance timeout stays at twice the lease, and at
	// least the session; explicit commits may renew for what the rebalance timeout leaves beyond
	// the lease, two intervals, the bound on a commit's answer and the longer of that bound and a
	// renewal interval (expelBound, commitWindow).
	for _, tc := range []struct {
		lease, session, interval, window time.Duration
	}{
		{5 * time.Second, 6250 * time.Millisecond, 500 * time.Millisecond, 2748 * time.Millisecond},
		{time.Second, 1250 * time.Millisecond, 100 * time.Millisecond, 348 * time.Millisecond},
		{500 * time.Millisecond, time.Second, 100 * time.Millisecond, 0},
		{60 * time.Second, 69 * time.Second, 3 * time.Second, 44874 * time.Millisecond},
	} {
		c := validConfig()
		c.HeartbeatTimeout, c.RenewInterval = Duration(tc.lease), nil
		c.SetDefaults()
		if err := c.Validate(); err != nil {
			t.Fatalf("lease %v: %v", tc.lease, err)
		}
		timing, _ := c.groupTiming()
		if want := max(2*tc.lease, tc.session, 1500*time.Millisecond); timing.Session != tc.session || timing.Interval != tc.interval || timing.MaxPoll != want {
			t.Errorf("lease %v: session %v interval %v maxPoll %v; want %v %v %v",
				tc.lease, timing.Session, timing.Interval, timing.MaxPoll, tc.session, tc.interval, want)
		}
		if got := SessionTimeout(tc.lease); got != tc.session {
			t.Errorf("SessionTimeout(%v) = %v, want %v", tc.lease, got, tc.session)
		}
		if got := timing.CommitWindow(c.settings()); got != tc.window {
			t.Errorf("lease %v: explicit commits may renew for %v after the last automatic one, want %v", tc.lease, got, tc.window)
		}
		if timing.Session < tc.lease+2*timing.Interval {
			t.Errorf("lease %v: derived timing breaks its own safety margin", tc.lease)
		}
	}
}

func TestCloseBound(t *testing.T) {
	// The rebalance timeout plus a lease: the rebalance timeout is twice the lease, or the session
	// if that is longer, and at least ClassicRebalanceFloor under the classic protocol, or what
	// max.poll.interval.ms says.
	for _, tc := range []struct {
		name  string
		lease time.Duration
		kafka KafkaConfigMap
		want  time.Duration
	}{
		{"defaults", 0, nil, 15 * time.Second},
		{"1s lease", time.Second, nil, 3 * time.Second},
		{"shortest lease: the classic rebalance timeout's floor, 1.5 s", 500 * time.Millisecond, nil, 2 * time.Second},
		{"shortest lease, KIP-848: twice the lease", 500 * time.Millisecond, KafkaConfigMap{"group.protocol": "consumer"}, 1500 * time.Millisecond},
		{"shortest lease, max.poll.interval.ms at the session", 500 * time.Millisecond, KafkaConfigMap{"max.poll.interval.ms": 1000}, 1500 * time.Millisecond},
		{"long session", 0, KafkaConfigMap{"session.timeout.ms": 20000}, 25 * time.Second},
		{"max.poll.interval.ms", 0, KafkaConfigMap{"max.poll.interval.ms": "30000"}, 35 * time.Second},
		{"KIP-848", time.Second, KafkaConfigMap{"group.protocol": "consumer"}, 3 * time.Second},
	} {
		c := Config{KafkaConfig: tc.kafka}
		if tc.lease > 0 {
			c.HeartbeatTimeout = Duration(tc.lease)
		}
		got, err := c.CloseBound()
		if err != nil || got != tc.want {
			t.Errorf("%s: CloseBound() = %v, %v; want %v", tc.name, got, err, tc.want)
		}
		if _, ok := tc.kafka["bootstrap.servers"]; ok {
			t.Errorf("%s: CloseBound wrote the default bootstrap.servers into the caller's KafkaConfig", tc.name)
		}
	}

	_, err := Config{HeartbeatTimeout: Duration(100 * time.Millisecond)}.CloseBound()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "HeartbeatTimeout" {
		t.Errorf("CloseBound of a lease below the minimum: %v, want a ConfigError naming HeartbeatTimeout", err)
	}
}

func TestConsumerProtocolSkipsClientGroupTiming(t *testing.T) {
	c := validConfig()
	c.KafkaConfig["group.protocol"] = "consumer"
	timing, err := c.groupTiming()
	if err != nil {
		t.Fatal(err)
	}
	consumer, _, _ := c.clientConfigs(timing)
	for _, key := range []string{"session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"} {
		if _, ok := consumer[key]; ok {
			t.Errorf("%s set under group.protocol=consumer, which librdkafka rejects", key)
		}
	}
}

func TestConfigStringMasksSecrets(t *testing.T) {
	c := validConfig()
	c.KafkaConfig["sasl.password"] = "hunter2"
	c.KafkaConfig["sasl.jaas.config"] = `org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter3";`
	c.KafkaConfig["ssl.key.location"] = "/etc/key.pem"
	s := c.String()
	if strings.Contains(s, "hunter2") || strings.Contains(s, "hunter3") {
		t.Errorf("String leaks the password: %s", s)
	}
	if !strings.Contains(s, "/etc/key.pem") || !strings.Contains(s, "HeartbeatTimeout=5s") {
		t.Errorf("String lost information: %s", s)
	}
}

func TestSanitise(t *testing.T) {
	if got := Sanitise("my app/v2:α"); got != "my_app_v2__" {
		t.Errorf("Sanitise = %q", got)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := New(Config{HeartbeatTimeout: Duration(time.Millisecond)})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "HeartbeatTimeout" {
		t.Fatalf("want HeartbeatTimeout ConfigError, got %v", err)
	}
}

// An empty bootstrap.servers was accepted: New returned an instance that could never reach Kafka,
// and only librdkafka's warning at Close told of it.
func TestNewRefusesEmptyBootstrapServers(t *testing.T) {
	n, err := New(Config{KafkaConfig: KafkaConfigMap{"bootstrap.servers": ""}, LeaderGroupID: "g", Name: "n", Scribe: newTestLog(t).Scribe()})
	if n != nil {
		_ = n.Close()
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != `KafkaConfig["bootstrap.servers"]` {
		t.Fatalf("New with an empty bootstrap.servers = %v, want a ConfigError naming it", err)
	}
}

// librdkafka's logs go to the Scribe only when KafkaConfig asks for it, as a confluent-kafka-go
// client's go to its Logs channel: each client that forwards has a goroutine that wakes ten times a
// second (logForwarder).
func TestLogsForwardedOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		set     interface{}
		forward bool
	}{{nil, false}, {false, false}, {"false", false}, {true, true}, {"true", true}} {
		t.Run(fmt.Sprint(tc.set), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				km := KafkaConfigMap{}
				if tc.set != nil {
					km["go.logs.channel.enable"] = tc.set
				}
				r := newScriptRigFor(t, []string{""}, "", Config{KafkaConfig: km})
				defer r.close()
				consumer, producer, admin := r.n.d.ClientConfigs()
				for name, conf := range map[string]*driver.KafkaConfigMap{"consumer": consumer, "producer": producer, "admin": admin} {
					_, channel := (*conf)["go.logs.channel"]
					on, set := (*conf)["go.logs.channel.enable"]
					want := tc.forward && name != "admin"
					if set && on != true {
						t.Errorf("%s: go.logs.channel.enable=%v handed to librdkafka", name, on)
					}
					if (on == true) != want || channel != want {
						t.Errorf("%s: go.logs.channel.enable=%v, channel %v; want forwarding %v", name, on, channel, want)
					}
				}
			})
		})
	}
}

func TestNewLeavesCallerConfigMapAlone(t *testing.T) {
	km := KafkaConfigMap{}
	_, err := New(Config{KafkaConfig: km, HeartbeatTimeout: Duration(time.Millisecond)})
	if err == nil {
		t.Fatal("want an error")
	}
	if len(km) != 0 {
		t.Fatalf("New modified the caller's map: %v", km)
	}
}

// Whatever a user puts in KafkaConfig and the durations, preparing the config never panics, every
// refusal is a ConfigError, and an accepted config keeps the lease's safety margins: the session
// outlasts the lease by two group heartbeats, so that a leader cut off from Kafka fences itself
// before the coordinator can expel it, and a rebalance may last no less than the session.
func FuzzConfigPrepare(f *testing.F) {
	f.Add("session.timeout.ms", "5500", int64(5*time.Second), int64(100*time.Millisecond), false)
	f.Add("heartbeat.interval.ms", "3000", int64(time.Second), int64(0), false)
	f.Add("group.protocol", "consumer", int64(3*time.Second), int64(0), true)
	f.Add("max.poll.interval.ms", "soon", int64(0), int64(0), false)
	f.Add("group.instance.id", "pod-0", int64(0), int64(0), false)
	f.Fuzz(func(t *testing.T, key, value string, lease, poll int64, asInt bool) {
		c := Config{KafkaConfig: KafkaConfigMap{}, LeaderGroupID: "g", Name: "n", Scribe: newTestLog(t).Scribe()}
		if asInt {
			if v, err := strconv.Atoi(value); err == nil {
				c.KafkaConfig[key] = v
			} else {
				c.KafkaConfig[key] = value
			}
		} else {
			c.KafkaConfig[key] = value
		}
		if lease != 0 {
			c.HeartbeatTimeout = Duration(time.Duration(lease))
		}
		if poll != 0 {
			c.MinPollInterval = Duration(time.Duration(poll))
		}
		prepared, timing, err := c.prepare()
		if err != nil {
			for _, e := range flatten(err) {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("a refusal that is not a ConfigError: %T %v", e, e)
				}
			}
			return
		}
		ht := *prepared.HeartbeatTimeout
		if timing.Classic && timing.Session < ht+2*timing.Interval {
			t.Fatalf("accepted a session of %v for a lease of %v with group heartbeats every %v", timing.Session, ht, timing.Interval)
		}
		if timing.MaxPoll < timing.Session && timing.Classic {
			t.Fatalf("accepted max.poll.interval.ms %v below the session %v", timing.MaxPoll, timing.Session)
		}
		consumer, producer, _ := prepared.clientConfigs(timing)
		if consumer["enable.auto.offset.store"] != false || consumer["group.instance.id"] != nil || producer["group.id"] != nil {
			t.Fatalf("derived settings lost what goneli owns: consumer %v, producer %v", consumer, producer)
		}
	})
}

// flatten lists the errors joined in err.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var all []error
		for _, e := range j.Unwrap() {
			all = append(all, flatten(e)...)
		}
		return all
	}
	return []error{err}
}

// A refusal names what the user set; a value SetDefaults derived from it is named only where it
// explains the refusal. A HeartbeatTimeout of 0 was also reported as "RenewInterval (1ms) must be
// at most HeartbeatTimeout/3", a RenewInterval nobody had set.
func TestValidateReportsWhatTheUserSet(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config Config
		fields []string
	}{
		{"zero lease", Config{HeartbeatTimeout: Duration(0)}, []string{"HeartbeatTimeout"}},
		{"tiny lease", Config{HeartbeatTimeout: Duration(time.Millisecond)}, []string{"HeartbeatTimeout"}},
		{"long lease", Config{HeartbeatTimeout: Duration(time.Hour)}, []string{"HeartbeatTimeout"}},
		{"slow polls", Config{MinPollInterval: Duration(2 * time.Second)}, []string{"HeartbeatTimeout"}},
		{"slow polls and rare renewals", Config{MinPollInterval: Duration(2 * time.Second), RenewInterval: Duration(4 * time.Second)},
			[]string{"HeartbeatTimeout", "RenewInterval"}},
		{"zero lease, renewals faster than polls", Config{HeartbeatTimeout: Duration(0), MinPollInterval: Duration(time.Second), RenewInterval: Duration(time.Millisecond)},
			[]string{"HeartbeatTimeout", "RenewInterval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.config.LeaderGroupID, tc.config.Name = "g", "n"
			n, err := New(tc.config)
			if n != nil {
				_ = n.Close()
			}
			var got []string
			for _, e := range flatten(err) {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("%v is not a ConfigError", e)
				}
				got = append(got, ce.Field)
			}
			if !slices.Equal(got, tc.fields) {
				t.Errorf("refused %v, want %v: %v", got, tc.fields, err)
			}
		})
	}
}
