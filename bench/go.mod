module github.com/goneli/goneli/bench

go 1.26.0

require (
	github.com/goneli/goneli v0.0.0
	github.com/goneli/goneli/internal/kafkatest v0.0.0
	github.com/goneli/goneli/internal/realkafka v0.0.0
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/confluentinc/confluent-kafka-go/v2 v2.11.1 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/obsidiandynamics/libstdgo v0.4.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
