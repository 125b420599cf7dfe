package askafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The ends of a partition as goneli's own connection reads them (sidechan.EndOffsets: ListOffsets at
// isolation level 1, the last stable offset) beside read_uncommitted's high watermark and the log
// start, on a partition with two records and then a transaction left open: Kafka's last stable
// offset stops at the open transaction's first record and passes it once the transaction ends
// (Partition.fetchOffsetForTimestamp, core/src/main/scala/kafka/cluster/Partition.scala). A
// partition or topic that does not exist is answered per partition.
func listOffsetsCase() kcase {
	return kcase{
		name: "ListOffsets",
		run: func(t *testing.T, p *pair, s *side) *obs {
			o := newObs()
			topic, id := p.name("ends"), p.name("ends-txn")
			s.createTopic(t, topic, 1)
			w := s.dial(t)
			for _, v := range []string{"a", "b"} {
				if c := w.send(produceRequest(topic, -1, v), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; c != 0 {
					t.Fatalf("%s: produce: %s", s.name, code(c))
				}
			}
			ends := func(when string) {
				for _, iso := range []int8{0, 1} {
					req := kmsg.NewPtrListOffsetsRequest()
					req.ReplicaID, req.IsolationLevel = -1, iso
					for _, tp := range []struct {
						topic     string
						partition int32
						ts        int64
					}{{topic, 0, -1}, {topic, 0, -2}, {topic, 5, -1}, {p.name("ends-missing"), 0, -1}} {
						rt := kmsg.NewListOffsetsRequestTopic()
						rt.Topic = tp.topic
						rp := kmsg.NewListOffsetsRequestTopicPartition()
						rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp, rp.MaxNumOffsets = tp.partition, -1, tp.ts, 1
						rt.Partitions = append(rt.Partitions, rp)
						req.Topics = []kmsg.ListOffsetsRequestTopic{rt}
						r := w.send(req, 7).(*kmsg.ListOffsetsResponse)
						for _, at := range r.Topics {
							for _, ap := range at.Partitions {
								o.set(when+" isolation "+itoa(int32(iso))+" "+p.strip(at.Topic)+"["+itoa(ap.Partition)+"] at "+itoa(int32(tp.ts)),
									"%s offset %d", code(ap.ErrorCode), ap.Offset)
							}
						}
					}
				}
			}
			ends("committed only:")

			pid, epoch := initTransactions(t, s, w, id)
			add := kmsg.NewPtrAddPartitionsToTxnRequest()
			add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, pid, epoch
			at := kmsg.NewAddPartitionsToTxnRequestTopic()
			at.Topic, at.Partitions = topic, []int32{0}
			add.Topics = append(add.Topics, at)
			ar := w.send(add, 3).(*kmsg.AddPartitionsToTxnResponse)
			if c := ar.Topics[0].Partitions[0].ErrorCode; c != 0 {
				t.Fatalf("%s: AddPartitionsToTxn: %s", s.name, code(c))
			}
			pr := produceRequest(topic, -1, "c")
			pr.TransactionID = &id
			pr.Topics[0].Partitions[0].Records = producerBatch("c", pid, epoch, true)
			if c := w.send(pr, 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; c != 0 {
				t.Fatalf("%s: the transaction's produce: %s", s.name, code(c))
			}
			ends("a transaction open:")

			end := kmsg.NewPtrEndTxnRequest()
			end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, false
			o.set("EndTxn abort", "%s", code(w.send(end, 3).(*kmsg.EndTxnResponse).ErrorCode))
			// The abort's marker is written after EndTxn is answered: await the stable offset's move.
			limit := time.Now().Add(await)
			for {
				req := kmsg.NewPtrListOffsetsRequest()
				req.ReplicaID, req.IsolationLevel = -1, 1
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = topic
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = 0, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				if w.send(req, 7).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset > 2 {
					break
				}
				if time.Now().After(limit) {
					t.Fatalf("%s: the last stable offset stayed at the aborted transaction", s.name)
				}
				time.Sleep(50 * time.Millisecond) // the marker is written on the coordinator's schedule
			}
			ends("aborted:")
			return o
		},
	}
}

// initTransactions has the transaction coordinator of id found, as a transactional producer's
// first lookup creates __transaction_state, and the producer id and epoch of id initialised.
func initTransactions(t *testing.T, s *side, w *wire, id string) (int64, int16) {
	t.Helper()
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKeys = 1, []string{id}
	limit := time.Now().Add(await)
	for {
		c := w.send(fc, 4).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode
		if c == 0 {
			break
		}
		if !allowedWhileCreating([]string{code(c)}) || time.Now().After(limit) {
			t.Fatalf("%s: FindCoordinator for %s: %s", s.name, id, code(c))
		}
		time.Sleep(100 * time.Millisecond) // the topic is created and loaded on the broker's schedule
	}
	for {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = &id, 60000, -1, -1
		r := w.send(req, 4).(*kmsg.InitProducerIDResponse)
		switch r.ErrorCode {
		case 0:
			return r.ProducerID, r.ProducerEpoch
		case kerr.CoordinatorLoadInProgress.Code, kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.ConcurrentTransactions.Code:
		default:
			t.Fatalf("%s: InitProducerID for %s: %s", s.name, id, code(r.ErrorCode))
		}
		if time.Now().After(limit) {
			t.Fatalf("%s: InitProducerID for %s still answers %s", s.name, id, code(r.ErrorCode))
		}
		time.Sleep(100 * time.Millisecond) // the coordinator loads on its own schedule
	}
}
