package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli"
)

// writers are a member's fenced writers, one per role; nil when Options.Writes is empty. The map
// is filled before the member contends and only read afterwards, each entry by its role's task.
type writers map[string]*roleWriter

// roleWriter writes one role's numbered records; only the role's task goroutine uses it.
type roleWriter struct {
	f            *goneli.FencedProducer
	member, role string
	topic        string
	every        time.Duration
	last         time.Time
	seq          int64
}

func newWriters(o Options, member string, leads map[string]goneli.Leadership) (writers, error) {
	if o.Writes == "" {
		return nil, nil
	}
	ws := writers{}
	for role, l := range leads {
		// A short transaction timeout lets the broker abort what a killed leader left open
		// soon, should no successor initialise; read_committed readers wait for it until then.
		f, err := goneli.NewFencedProducer(l, goneli.FencedConfig{Timeout: 5 * time.Second,
			KafkaConfig: goneli.KafkaConfigMap{"transaction.timeout.ms": 10000}})
		if err != nil {
			ws.close()
			return nil, err
		}
		ws[role] = &roleWriter{f: f, member: member, role: role, topic: o.Writes, every: o.WriteEvery}
	}
	return ws, nil
}

// write sends the role's next record if WriteEvery has passed since the last. A fenced write is
// what the chaos suite provokes; other failures are logged, and the record's number is reused.
func (ws writers) write(role string) {
	w := ws[role]
	if w == nil || time.Since(w.last) < w.every {
		return
	}
	w.last = time.Now()
	err := w.f.Transaction(context.Background(), func(tx *goneli.FencedTx) error {
		v, _ := json.Marshal(WriteRecord{Member: w.member, Role: w.role, Token: tx.Token(), Seq: w.seq + 1})
		return tx.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: kafka.PartitionAny},
			Key: []byte(w.role), Value: v})
	})
	switch {
	case err == nil:
		w.seq++
	case errors.Is(err, goneli.ErrWriteFenced):
	default:
		fmt.Fprintf(os.Stderr, "%s write of %s role %q: %v\n", time.Now().Format("15:04:05.000"), w.member, w.role, err)
	}
}

func (ws writers) close() {
	for _, w := range ws {
		_ = w.f.Close()
	}
}
