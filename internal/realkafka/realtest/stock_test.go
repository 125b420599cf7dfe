package realtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/goneli/goneli/internal/testkit"
	"github.com/twmb/franz-go/pkg/kadm"
)

// Principals of the stock cluster's SASL listener: admin is a super user, neli holds what a
// contender needs (docs/operations.md, ACLs) save DescribeConfigs.
const (
	adminUser, adminPassword = "admin", "admin-secret"
	neliUser, neliPassword   = "neli", "neli-secret"
)

// stockOptions is a cluster at Apache Kafka's stock group timing (a 6 s least classic session, a
// 3 s initial rebalance delay, KIP-848 sessions of 45 s and heartbeats of 5 s) that authorises
// requests (StandardAuthorizer): the harness's own listener, and the members of TestElectionStock
// through it, are ANONYMOUS, a super user; a SASL/PLAIN listener serves the principals above.
func stockOptions() realkafka.Options {
	return realkafka.Options{
		Profile:   realkafka.Stock,
		Listeners: []realkafka.Listener{{Name: "SASL", Protocol: "SASL_PLAINTEXT"}},
		Configs: map[string]string{
			"authorizer.class.name":   "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
			"super.users":             "User:ANONYMOUS;User:" + adminUser,
			"sasl.enabled.mechanisms": "PLAIN",
			"listener.name.sasl.plain.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required " +
				"user_" + adminUser + `="` + adminPassword + `" user_` + neliUser + `="` + neliPassword + `";`,
		},
	}
}

// TestElection at Kafka's stock group timing. goneli derives a 1.25 s session for the 1 s lease,
// which the broker would refuse: New reads group.min.session.timeout.ms and raises the session to
// 6 s, and failover after a crash or a freeze follows that bound. Under KIP-848 the 45 s session
// is the broker's and covers the lease; a graceful handoff takes a heartbeat interval (5 s) and
// an assignment interval, and a crash or freeze is left out: it takes the 45 s session, which
// the fast profile's run proves at 2 s already.
func TestElectionStock(t *testing.T) {
	eachProtocolOn(t, realkafka.Shared(t, stockOptions()), func(t *testing.T, c *realkafka.Cluster, p protocol) {
		if p.name == consumer.name {
			election(t, c, p, "sigterm")
			return
		}
		election(t, c, p, "sigterm", "sigkill", "sigstop")
	})
}

// The session goneli derives, against Kafka's 6 s least session, for a principal that may describe
// the brokers' and the group's configs and for one that may not. Classic: New raises the 1.25 s it
// derives for the 1 s lease to the broker's 6 s and leads; without DescribeConfigs it cannot read
// the least, and raises the session to Kafka's default least, 6 s, which this broker keeps, saying
// so and what to grant, and leads. KIP-848: New reads the broker's 45 s session and 5 s heartbeat,
// which cover the lease, and leads; without DescribeConfigs the group's own session, which may be
// shorter than the brokers' (Kafka 4.0), cannot be told, and New fails naming the grant.
func TestSessionDerivation(t *testing.T) {
	c := realkafka.Shared(t, stockOptions())
	sasl := c.Listener(t, "SASL")
	adm := admin(t, c)
	eachProtocolOn(t, c, func(t *testing.T, c *realkafka.Cluster, p protocol) {
		group := groupName(t)
		topic := group + ".neli"
		ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
		defer cancel()
		if _, err := adm.CreateTopic(ctx, 1, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
		grant(t, adm, kadm.NewACLs().Topics(topic).Operations(kadm.OpDescribe, kadm.OpRead, kadm.OpWrite))
		grant(t, adm, kadm.NewACLs().Groups(group).Operations(kadm.OpDescribe, kadm.OpRead))

		t.Run("describe-configs", func(t *testing.T) {
			log := testkit.NewLog(t)
			n := contend(t, sessionConfig(sasl, group, "admin", adminUser, adminPassword, p, log))
			awaitLeads(t, n)
			if p.name == classic.name && !log.Contains("session timeout raised from 1.25s to 6s") {
				t.Error("New did not say that it raised the session to the broker's 6 s")
			}
			if log.Contains("could not read") {
				t.Error("New could not read the broker's group timing as a super user")
			}
		})
		t.Run("no-describe-configs", func(t *testing.T) {
			log := testkit.NewLog(t)
			config := sessionConfig(sasl, group, "neli", neliUser, neliPassword, p, log)
			if p.name == consumer.name {
				n, err := goneli.New(config)
				if err == nil {
					_ = n.Close()
				}
				var refused *goneli.AuthorizationError
				if !errors.As(err, &refused) || refused.Operation != "DescribeConfigs" || refused.Principal != "User:"+neliUser {
					t.Fatalf("New: %v; want an error naming the DescribeConfigs grant to User:%s", err, neliUser)
				}
				t.Logf("without DescribeConfigs: %v", err)
				return
			}
			n := contend(t, config)
			awaitLeads(t, n)
			const raised = "so the session timeout is raised from 1.25s to Apache Kafka's default minimum, 6s"
			if !log.Contains(raised) || !log.Contains("Grant DescribeConfigs on the cluster") {
				t.Errorf("New did not say that it raised the session to Kafka's default least and what to grant")
			}
		})
	})
}

// grant allows the builder's operations to neli.
func grant(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	res, err := adm.CreateACLs(ctx, b.Allow("User:"+neliUser).AllowHosts().ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("granting %v on %s %s: %v", r.Operation, r.Type, r.Name, r.Err)
		}
	}
}

// sessionConfig is a contender's configuration on the SASL listener as user.
func sessionConfig(bootstrap, group, name, user, password string, p protocol, log *testkit.Log) goneli.Config {
	kc := goneli.KafkaConfigMap{"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
		"sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password, "log_level": 3}
	if p.name == consumer.name {
		kc["group.protocol"] = "consumer"
	}
	return goneli.Config{KafkaConfig: kc, LeaderGroupID: group, LeaderTopic: group + ".neli", Name: name,
		HeartbeatTimeout: goneli.Duration(lease), MinPollInterval: goneli.Duration(pollInterval), Scribe: log.Scribe()}
}

// contend makes an instance of config, closed when the test ends (Close must return, and in time).
func contend(t *testing.T, config goneli.Config) goneli.Neli {
	t.Helper()
	n, err := goneli.New(config)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

// awaitLeads pulses n in the background until it leads.
func awaitLeads(t *testing.T, n goneli.Neli) {
	t.Helper()
	p, err := n.Background(func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.Close()
		_ = p.Await()
	}()
	// IsLeader turns true once the barrier has returned from LeaderAcquired; nothing announces it.
	limit := time.Now().Add(awaitLimit)
	for !n.IsLeader() {
		if err := p.Error(); err != nil {
			t.Fatalf("Pulse: %v", err)
		}
		if time.Now().After(limit) {
			t.Fatal("gave up waiting for the instance to lead")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pulseError pulses n in the background and returns the error that stops it.
func pulseError(t *testing.T, n goneli.Neli) error {
	t.Helper()
	p, err := n.Background(func() {})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Await() }()
	select {
	case err := <-done:
		return err
	case <-time.After(awaitLimit):
		p.Close()
		<-done
		t.Fatal("Pulse returned no error")
		return nil
	}
}
