package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
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
	out          *writer
	member, role string
	topic        string
	every        time.Duration
	last         time.Time
	seq          int64
	// committing is when the transaction under way last called CommitTransaction; the
	// producer's trace reports it from within Transaction, on the task's goroutine.
	committing time.Time
}

// initialised records, per role, the last tenure that the role's FencedProducer initialised for
// at acquisition; the producer's trace reports it just before the barrier hears of LeaderAcquired.
type initialised struct {
	mu     sync.Mutex
	tokens map[string]int64
}

func (in *initialised) set(role string, token int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.tokens[role] = token
}

// is reports whether role's producer initialised for token.
func (in *initialised) is(role string, token int64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.tokens[role] == token
}

// newWriters makes a FencedProducer per led role whose trace reports its initialisations to inits
// and its commit calls to the role's writer.
func newWriters(o Options, out *writer, leads map[string]goneli.Leadership, inits *initialised) (writers, error) {
	if o.Writes == "" {
		return nil, nil
	}
	ws := writers{}
	for role, l := range leads {
		w := &roleWriter{out: out, member: out.name, role: role, topic: o.Writes, every: o.WriteEvery}
		trace := &goneli.FencedTrace{
			Initialised: func(token int64) { inits.set(role, token) },
			// The writer's goroutine is the one that commits, so no lock is needed.
			Committing: func(int64) { w.committing = time.Now() },
		}
		// A short transaction timeout lets the broker abort what a killed leader left open
		// soon, should no successor initialise; read_committed readers wait for it until then.
		f, err := goneli.NewFencedProducer(l, goneli.FencedConfig{Timeout: 5 * time.Second, Trace: trace,
			KafkaConfig: goneli.KafkaConfigMap{"transaction.timeout.ms": 10000}})
		if err != nil {
			ws.close()
			return nil, err
		}
		w.f = f
		ws[role] = w
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
	w.committing = time.Time{}
	var token int64
	err := w.f.Transaction(context.Background(), func(tx *goneli.FencedTx) error {
		token = tx.Token()
		v, _ := json.Marshal(WriteRecord{Member: w.member, Role: w.role, Token: tx.Token(), Seq: w.seq + 1})
		return tx.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: kafka.PartitionAny},
			Key: []byte(w.role), Value: v})
	})
	switch {
	case err == nil:
		w.seq++
		w.out.write(Line{At: w.committing.UnixNano(), Event: EventCommit, Role: w.role, Token: token})
	case errors.Is(err, goneli.ErrWriteFenced):
		var fe *goneli.FencedWriteError
		if errors.As(err, &fe) && fe.Token != 0 {
			how := RefusedLocally
			if fe.Broker {
				how = RefusedByBroker
			}
			w.out.write(Line{Event: EventRefused, Role: w.role, Token: fe.Token, Info: how})
		}
	default:
		fmt.Fprintf(os.Stderr, "%s write of %s role %q: %v\n", time.Now().Format("15:04:05.000"), w.member, w.role, err)
	}
}

func (ws writers) close() {
	for _, w := range ws {
		_ = w.f.Close()
	}
}
