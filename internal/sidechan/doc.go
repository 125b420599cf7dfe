// Package sidechan is goneli's own connection to Kafka beside librdkafka: one franz-go (kgo)
// client per instance, which the group check, the batched heartbeats of several roles, Describe and
// the doctor share. It issues the Kafka protocol's own messages (kmsg) and leaves routing,
// coordinators, retries, re-authentication, throttling and idle connections to kgo.
//
// It exists because librdkafka 2.11.1 aborts the process when a coordinator-bound admin request
// meets a coordinator connection that has just dropped (confluentinc/librdkafka#4605), and because
// librdkafka's producer puts one partition in a request (confluentinc/librdkafka#1700). Its
// guarantee is availability, not safety: the lease's argument rests on librdkafka's consumer alone.
// So it is never less available than librdkafka: where it cannot follow the instance's settings
// (Translate says which) it is not made, and where a broker's certificate is one that Go refuses
// it gives way to librdkafka for good (FallbackError); in both cases the callers use librdkafka,
// as before this package existed.
package sidechan
