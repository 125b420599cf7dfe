// Command basic runs a leader task in the background with goneli's Background pulser. Start it in
// several terminals with the same -kafka to watch only one of them work.
package main

import (
	"log"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/examples/internal/local"
)

func main() {
	env, done := local.Start()
	defer done()

	n, err := goneli.New(goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": env.Servers},
		LeaderGroupID: "example-basic",
	})
	if err != nil {
		log.Fatal(err)
	}
	// The task runs over and over while this instance leads. Each run is one small unit of work:
	// leadership is checked between runs, so a run must end well within the lease.
	p, err := n.Background(func() {
		log.Printf("leader: doing one unit of work")
		time.Sleep(500 * time.Millisecond)
	})
	if err != nil {
		log.Fatal(err)
	}

	<-env.Ctx.Done()
	// Close hands leadership over at once instead of making a successor wait out the session.
	if err := n.Close(); err != nil {
		log.Print(err)
	}
	if err := p.Await(); err != nil {
		log.Print(err)
	}
}
