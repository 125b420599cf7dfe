package goneli_test

import (
	"fmt"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// Contend for leadership on an embedded broker, lead, and hand over on Close.
func Example() {
	broker, err := kafkatest.Start()
	if err != nil {
		panic(err)
	}
	defer broker.Close()

	n, err := goneli.New(goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": broker.Addr},
		LeaderGroupID:    "example",
		HeartbeatTimeout: goneli.Duration(time.Second),
		Scribe:           scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)}),
	}, func(e goneli.Event) {
		switch e.(type) {
		case goneli.LeaderAcquired:
			fmt.Println("acquired")
		case goneli.LeaderFenced:
			fmt.Println("fenced")
		case goneli.LeaderRevoked:
			fmt.Println("revoked")
		}
	})
	if err != nil {
		panic(err)
	}
	for {
		leader, err := n.Pulse(100 * time.Millisecond)
		if err != nil {
			panic(err)
		}
		if leader {
			fmt.Println("doing leader work")
			break
		}
	}
	_ = n.Close()
	fmt.Println(n.State())
	// Output:
	// acquired
	// doing leader work
	// revoked
	// Closed
}
