// Command basic leads with goneli.Run: a leader function that gets a context, cancelled when
// leadership ends, and a graceful handover on SIGINT or SIGTERM. Start it in several terminals
// with the same -kafka to watch only one of them work, and stop that one to see another take over.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/examples/internal/local"
)

func main() {
	env, done := local.Start() // -kafka, or an embedded broker; -for bounds the run
	defer done()

	// Without this, a SIGTERM kills the process and the successor waits out the group session
	// (about 1.25 x HeartbeatTimeout) instead of taking over at once.
	ctx, stop := signal.NotifyContext(env.Ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	err := goneli.Run(ctx, goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": env.Servers},
		LeaderGroupID: "example-basic",
	}, func(ctx context.Context) {
		log.Printf("leader: acquired")
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				log.Printf("leader: stopping (%v)", context.Cause(ctx))
				return
			case <-tick.C:
				log.Printf("leader: doing one unit of work")
			}
		}
	})
	if err != nil {
		log.Fatal(err)
	}
}
