// Package local gives the examples a Kafka to talk to and a bounded lifetime, so that each one
// runs on a machine with no Kafka and ends by itself. Programs outside this module cannot import
// it (it is internal); the embedded broker it starts is nelitest's, which they can use the same
// way for a local mode or a test, and a real cluster otherwise.
package local

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goneli/goneli/nelitest"
)

// Env is what an example runs with.
type Env struct {
	// Servers are the bootstrap servers: -kafka, or an embedded broker's address.
	Servers string
	// Embedded is true when Servers belong to an embedded broker started by Start.
	Embedded bool
	// Ctx ends after -for, or on SIGINT or SIGTERM.
	Ctx context.Context
}

// Start adds -kafka and -for to the program's own flags, parses the command line and, without
// -kafka, starts an embedded Kafka-protocol broker in this process. Call the returned function
// after closing every Neli: it stops the broker.
func Start() (Env, func()) {
	kafka := flag.String("kafka", "", "bootstrap servers (default: an embedded broker)")
	runFor := flag.Duration("for", 5*time.Second, "how long to run")
	flag.Parse()

	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, *runFor)
	env := Env{Servers: *kafka, Ctx: ctx}
	stopBroker := func() {}
	if *kafka == "" {
		b, err := nelitest.New()
		if err != nil {
			log.Fatalf("starting the embedded broker: %v", err)
		}
		fmt.Fprintf(os.Stderr, "no -kafka given: using an embedded broker at %s\n", b.Addr())
		env.Servers, env.Embedded, stopBroker = b.Addr(), true, b.Close
	}
	return env, func() {
		cancel()
		stopSignals()
		stopBroker()
	}
}
