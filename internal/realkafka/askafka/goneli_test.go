package askafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/sidechan"
)

// goneli's own connection describes each kind of group, asked as either protocol's instance asks:
// the description it makes of the answers, in librdkafka's form, is what the group check, Describe
// and neli status read.
func sidechanCase() kcase {
	return kcase{
		name:   "sidechan describes groups",
		argued: func(_ *pair, d difference) string { return reconcilingArgued(d) },
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			g := p.groups()
			groups := []string{g.classic, g.simple, g.unknown}
			if p.kip848 {
				groups = append(groups, g.consumer)
			}
			for _, consumer := range []bool{false, true} {
				c, err := sidechan.New(kafka.ConfigMap{"bootstrap.servers": s.addr}, sidechan.Options{ConsumerProtocol: consumer, Limit: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), await)
				for _, group := range groups {
					k := map[bool]string{false: "as classic ", true: "as consumer "}[consumer] + p.strip(group)
					res, err := c.DescribeConsumerGroups(ctx, []string{group})
					if err != nil {
						o.set(k+" error", "%v", err)
						continue
					}
					d := res.ConsumerGroupDescriptions[0]
					o.set(k+" error", "%v %s", d.Error.Code(), p.strip(d.Error.String()))
					o.set(k+" state", "%v type %v simple %v assignor %q", d.State, d.Type, d.IsSimpleConsumerGroup, d.PartitionAssignor)
					o.set(k+" members", "%d", len(d.Members))
					for _, m := range d.Members {
						o.set(k+" member", "%s on %s", m.ClientID, m.Host)
						var parts []string
						for _, tp := range m.Assignment.TopicPartitions {
							name := "(unnamed)"
							if tp.Topic != nil {
								name = p.strip(*tp.Topic)
							}
							parts = append(parts, name+":"+itoa(tp.Partition))
						}
						o.set(k+" member assignment", "%v", parts)
					}
				}
				cancel()
				c.Close()
			}
			return o
		},
	}
}

// The doctor's verdicts, line by line, for the classic group (which exists, on a topic that does)
// and for a group and leader topic that do not exist yet, under each protocol the cluster serves.
func doctorCase() kcase {
	return kcase{
		name: "doctor",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			g := p.groups()
			protocols := []string{"classic"}
			if p.kip848 {
				protocols = append(protocols, "consumer")
			}
			for _, protocol := range protocols {
				for _, c := range []struct{ what, group, topic string }{
					{"existing", g.classic, g.topic},
					{"new", p.name("doctor-new"), p.name("doctor-new-topic")},
				} {
					ctx, cancel := context.WithTimeout(context.Background(), await)
					r, _ := goneli.Check(ctx, goneli.Config{
						KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": s.addr, "group.protocol": protocol},
						LeaderGroupID: c.group, LeaderTopic: c.topic, Name: "doctor",
						HeartbeatTimeout: goneli.Duration(time.Second),
					})
					cancel()
					for _, res := range r.Checks {
						k := protocol + " " + c.what + " " + res.Name
						o.set(k, "%v", res.Status)
						o.set(k+" says", "%s", strings.ReplaceAll(p.strip(res.Detail), s.addr, "ADDR"))
					}
				}
			}
			return o
		},
		argued: func(p *pair, d difference) string {
			field := d.field
			if strings.HasSuffix(field, " broker says") {
				return laterRelease(p, "the doctor names the protocols the broker lists, and later releases list more")
			}
			return ""
		},
	}
}

// doctorOnNewCluster runs the doctor on a cluster that has never had a transaction, for a group and
// leader topic that do not exist: it must not look a transaction coordinator up, which would create
// __transaction_state (KafkaApis.getCoordinator, core/src/main/scala/kafka/server/KafkaApis.scala),
// and asks DescribeTransactions instead, which a broker without that topic answers NOT_COORDINATOR.
func doctorOnNewCluster(t *testing.T, p *pair, s *side) *obs {
	o := newObs()
	group := p.name("doctor-fresh")
	ctx, cancel := context.WithTimeout(context.Background(), await)
	defer cancel()
	for _, protocol := range []string{"classic", "consumer"} {
		if protocol == "consumer" && !p.kip848 {
			continue
		}
		r, _ := goneli.Check(ctx, goneli.Config{
			KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": s.addr, "group.protocol": protocol},
			LeaderGroupID: group, LeaderTopic: group + ".neli", Name: "doctor",
			HeartbeatTimeout: goneli.Duration(time.Second),
		})
		for _, res := range r.Checks {
			k := protocol + " " + res.Name
			o.set(k, "%v", res.Status)
			o.set(k+" says", "%s", strings.ReplaceAll(p.strip(res.Detail), s.addr, "ADDR"))
		}
	}
	o.set("internal topics", "%v", s.internalTopics(t))
	return o
}
