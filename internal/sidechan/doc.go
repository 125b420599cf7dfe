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
// (Translate says which) it is not made; where a TLS handshake fails for a reason of TLS rather
// than of the network (a certificate Go refuses to parse or trust, cipher suites Go does not offer)
// it gives way to librdkafka for good (FallbackError); and an instance that finds it failing for
// about a lease while librdkafka's commits are accepted makes it give way too (GiveWay). In each
// case the callers use librdkafka, as before this package existed.
package sidechan
