// Command logrus sends goneli's logs, and librdkafka's, which goneli forwards when asked to
// (go.logs.channel.enable), through logrus by way of libstdgo's scribe binding.
package main

import (
	"context"
	"flag"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/examples/internal/local"
	"github.com/obsidiandynamics/libstdgo/scribe"
	scribelogrus "github.com/obsidiandynamics/libstdgo/scribe/logrus"
	"github.com/sirupsen/logrus"
)

func main() {
	level := flag.String("level", "debug", "logrus level: trace, debug, info, warn or error")
	env, done := local.Start()
	defer done()

	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{})
	lvl, err := logrus.ParseLevel(*level)
	if err != nil {
		log.Fatal(err)
	}
	// The binding asks logrus which levels are enabled, so this one setting filters goneli's
	// output too.
	log.SetLevel(lvl)

	config := goneli.Config{
		KafkaConfig: goneli.KafkaConfigMap{
			"bootstrap.servers": env.Servers,
			// librdkafka's own lines through the Scribe too, rather than on stderr.
			"go.logs.channel.enable": true,
		},
		LeaderGroupID: "example-logrus",
		Scribe:        scribe.New(scribelogrus.Bind(log)),
	}
	err = goneli.Run(env.Ctx, config, func(ctx context.Context) {
		log.WithField("role", "leader").Info("leading until told to stop")
		<-ctx.Done()
		log.WithField("role", "leader").Info("stopped leading")
	})
	if err != nil {
		log.Error(err)
	}
}
