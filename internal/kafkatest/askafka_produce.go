package kafkatest

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produce holds an acks=-1 produce for the node's ack delay (Kafka.SetAckDelay, AckDelay), as a
// Kafka broker does until its in-sync replicas have the records: ReplicaManager.appendRecords
// parks such a request in the produce purgatory (delayedProduceRequestRequired), and
// DelayedProduce answers it once they do, or at the request's timeout with REQUEST_TIMED_OUT for
// each partition still waiting (core/src/main/scala/kafka/server/DelayedProduce.scala,
// onExpiration). The connection serves nothing else meanwhile, as Kafka's does. Kafka appends the
// records at once and kfake when the hold ends, but in both consumers see them (the high
// watermark) only once they are acknowledged, so from outside the two are alike.
func (k *Kafka) produce(x *exchange, node int32) ([]byte, bool) {
	req, ok := x.request().(*kmsg.ProduceRequest)
	if !ok || req.Acks != -1 {
		return x.patched(failedOffsets)
	}
	start := time.Now()
	deadline := start.Add(time.Duration(req.TimeoutMillis) * time.Millisecond)
	for {
		d, changed := k.ackDelayOf(node)
		acked := start.Add(d)
		if !acked.After(time.Now()) {
			return x.patched(failedOffsets)
		}
		if !deadline.After(time.Now()) {
			break
		}
		wait := acked
		if deadline.Before(wait) {
			wait = deadline
		}
		hold := time.NewTimer(time.Until(wait))
		select {
		case <-hold.C:
		case <-changed:
		case <-x.c.downClosed:
			hold.Stop()
			return nil, false
		}
		hold.Stop()
	}
	return x.patched(func(_ kmsg.Request, resp kmsg.Response) bool {
		r := resp.(*kmsg.ProduceResponse)
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				if p := &r.Topics[i].Partitions[j]; p.ErrorCode == 0 {
					p.ErrorCode = kerr.RequestTimedOut.Code
				}
			}
		}
		failedOffsets(nil, r)
		return true
	})
}

// failedOffsets gives each partition that failed the offsets Kafka gives it, -1 (ProduceResponse.
// PartitionResponse(Errors), clients/src/main/java/org/apache/kafka/common/requests/
// ProduceResponse.java: INVALID_OFFSET and NO_TIMESTAMP); kfake gives 0.
func failedOffsets(_ kmsg.Request, resp kmsg.Response) bool {
	r := resp.(*kmsg.ProduceResponse)
	changed := false
	for i := range r.Topics {
		for j := range r.Topics[i].Partitions {
			p := &r.Topics[i].Partitions[j]
			if p.ErrorCode != 0 && (p.BaseOffset != -1 || p.LogAppendTime != -1 || p.LogStartOffset != -1) {
				p.BaseOffset, p.LogAppendTime, p.LogStartOffset, changed = -1, -1, -1, true
			}
		}
	}
	return changed
}
