package coretest

import (
	"sync"
	"testing"

	. "github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceTally counts the ProduceRequests the broker received for a topic and the partitions they
// carried, and can refuse those that carry more than one.
type produceTally struct {
	mu             sync.Mutex
	requests, recs int
	multi          int // requests that carried several partitions
	refuseMulti    bool
}

func (c *produceTally) counts() (requests, recs, multi int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests, c.recs, c.multi
}

func (c *produceTally) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests, c.recs, c.multi = 0, 0, 0
}

// tallyProduce installs a tally of the produce requests for topic.
func tallyProduce(b *kafkatest.Broker, topic string) *produceTally {
	c := &produceTally{}
	b.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		n := 0
		for _, t := range r.Topics {
			if t.Topic == topic {
				n += len(t.Partitions)
			}
		}
		if n == 0 {
			return nil, nil, false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.requests++
		c.recs += n
		if n == 1 {
			return nil, nil, false
		}
		c.multi++
		if !c.refuseMulti {
			return nil, nil, false
		}
		return rejectProduce(r), nil, true
	})
	return c
}

// One instance leading several roles renews them all with one ProduceRequest per renewal, not one
// per role: the leases renew on shared ticks and the cycle writes their heartbeats together.
func TestRolesShareOneProducePerRenewal(t *testing.T) {
	b := startKafka(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := Shards(8)
	tally := tallyProduce(b, group+".neli")
	rs := roleContender(t, testConfig(b, group, "a", log), roles, r)
	awaitLed(t, "every role led", roles, map[string]Roles{"a": rs}, func(map[string][]string) bool { return true })

	tally.reset()
	awaitCondition(t, "four renewals of every role", func() bool {
		_, recs, _ := tally.counts()
		return recs >= 4*len(roles)
	})
	requests, recs, multi := tally.counts()
	t.Logf("%d heartbeats in %d produce requests, %d of them for several roles", recs, requests, multi)
	if multi == 0 || 2*requests > recs {
		t.Errorf("%d heartbeats in %d produce requests (%d for several roles); want several roles' heartbeats per request", recs, requests, multi)
	}
	for _, e := range r.snapshot() {
		if _, ok := e.what.(LeaderFenced); ok {
			t.Errorf("a role was fenced: %v", e.what)
		}
	}
	checkRoles(t, r.snapshot())
}

// When the broker refuses the heartbeats written together, librdkafka writes them one by one
// instead, and every role stays led.
func TestRolesHeartbeatsFallBackToLibrdkafka(t *testing.T) {
	b := startKafka(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := Shards(4)
	tally := tallyProduce(b, group+".neli")
	tally.mu.Lock()
	tally.refuseMulti = true
	tally.mu.Unlock()
	rs := roleContender(t, testConfig(b, group, "a", log), roles, r)
	awaitLed(t, "every role led", roles, map[string]Roles{"a": rs}, func(map[string][]string) bool { return true })
	tally.reset()
	// A refused round sends the next lease's heartbeats through librdkafka, then tries again.
	awaitCondition(t, "three refused rounds", func() bool {
		_, _, multi := tally.counts()
		return multi >= 3
	})
	if got := rs.Leading(); len(got) != len(roles) {
		t.Errorf("leading %v, want every role", got)
	}
	for _, e := range r.snapshot() {
		if _, ok := e.what.(LeaderFenced); ok {
			t.Errorf("a role was fenced: %v", e.what)
		}
	}
	checkRoles(t, r.snapshot())
}

// On a cluster of three brokers each round writes one request per broker that leads some of the
// roles' partitions.
func TestRolesShareProducesOnSeveralBrokers(t *testing.T) {
	b := startKafka(t, kfake.NumBrokers(3))
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := Shards(6)
	tally := tallyProduce(b, group+".neli")
	rs := roleContender(t, testConfig(b, group, "a", log), roles, r)
	awaitLed(t, "every role led", roles, map[string]Roles{"a": rs}, func(map[string][]string) bool { return true })
	leaders := map[int32]bool{}
	for _, p := range b.PartitionInfos(group + ".neli") {
		leaders[p.Leader] = true
	}
	tally.reset()
	awaitCondition(t, "four renewals of every role", func() bool {
		_, recs, _ := tally.counts()
		return recs >= 4*len(roles)
	})
	requests, recs, multi := tally.counts()
	t.Logf("%d heartbeats in %d produce requests, %d of them for several roles; partitions led by %d brokers", recs, requests, multi, len(leaders))
	if len(leaders) > 1 && requests*len(roles) > 2*recs*len(leaders) {
		t.Errorf("%d heartbeats in %d produce requests; want about one request per broker and round", recs, requests)
	}
	for _, e := range r.snapshot() {
		if _, ok := e.what.(LeaderFenced); ok {
			t.Errorf("a role was fenced: %v", e.what)
		}
	}
	checkRoles(t, r.snapshot())
}
