package askafka

import (
	"testing"
	"time"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestDebugReconciling(t *testing.T) {
	t.Setenv(kafkatest.AsKafkaEnv, "")
	kb := kafkatest.StartT(t, kfake.BrokerConfigs(fastConfigs), kafkatest.AsKafka())
	s := &side{name: "as", addr: kb.Addr, kb: kb}
	s.warm(t)
	s.createTopic(t, "tt", 1)
	w := s.dial(t)
	member, epoch := joinConsumer(t, w, "g", "tt")
	s.createTopic(t, "other", 1)
	for i := 0; i < 5; i++ {
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.MemberEpoch = "g", member, epoch
		r := w.send(hb, 1).(*kmsg.ConsumerGroupHeartbeatResponse)
		t.Logf("hb: err %d epoch %d assignment %+v", r.ErrorCode, r.MemberEpoch, r.Assignment)
		epoch = r.MemberEpoch
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{"g"}
		g := s.dial(t).send(req, 0).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
		t.Logf("state %s epoch %d assignment epoch %d member epoch %d", g.State, g.Epoch, g.AssignmentEpoch, g.Members[0].MemberEpoch)
		time.Sleep(200 * time.Millisecond)
	}
}
