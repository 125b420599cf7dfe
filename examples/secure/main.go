// Command secure shows the librdkafka settings for a broker that needs TLS and SASL. goneli passes
// KafkaConfig to all of its clients (consumer, heartbeat producer and admin), so one map secures
// them all. Without -kafka it prints the secure configuration, with secrets masked, and runs the
// same election in plaintext against an embedded broker, which cannot do TLS.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/examples/internal/local"
)

func main() {
	caFile := flag.String("ca", "/etc/ssl/certs/kafka-ca.pem", "CA certificate that signed the broker's certificate")
	user := flag.String("user", "billing-scheduler", "SASL user")
	mechanism := flag.String("mechanism", "SCRAM-SHA-512", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	env, done := local.Start()
	defer done()

	secure := goneli.KafkaConfigMap{
		"bootstrap.servers": env.Servers,
		"security.protocol": "SASL_SSL",
		"ssl.ca.location":   *caFile,
		// librdkafka checks the broker's host name against its certificate by default; keep it.
		"ssl.endpoint.identification.algorithm": "https",
		"sasl.mechanisms":                       *mechanism,
		"sasl.username":                         *user,
		// Keep secrets out of code and command lines, where ps and shell history would show them.
		"sasl.password": os.Getenv("KAFKA_PASSWORD"),
		// For mutual TLS instead of SASL, set security.protocol=SSL and name the client's key pair:
		//   "ssl.certificate.location": "/etc/app/client.pem",
		//   "ssl.key.location":         "/etc/app/client.key",
		//   "ssl.key.password":         os.Getenv("KAFKA_KEY_PASSWORD"),
	}
	config := goneli.Config{KafkaConfig: secure, LeaderGroupID: "example-secure"}
	if env.Embedded {
		secure["bootstrap.servers"] = "kafka.example.com:9093"
		// Config.String masks passwords, secrets and keys, so it is safe to log.
		log.Printf("with a secured broker this example would use:\n  %v", config)
		log.Printf("running in plaintext against the embedded broker instead")
		config.KafkaConfig = goneli.KafkaConfigMap{"bootstrap.servers": env.Servers}
	}

	err := goneli.Run(env.Ctx, config, func(ctx context.Context) {
		for ctx.Err() == nil {
			log.Printf("leader: doing one unit of work")
			sleep(ctx, 500*time.Millisecond)
		}
	})
	if err != nil {
		log.Print(err)
	}
}

// sleep waits for d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
