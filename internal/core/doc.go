// Package core is goneli's functional core: every decision an instance makes about its roles'
// tenures, and nothing else. Machine (machine.go) takes what happened (an assignment and its
// revocation, a record read back, a commit's answer, a description of the group, a poll, the time
// passing, a yield) and carries out, through the Effects it is given, what follows for each role:
// heartbeats to produce, offsets to store or commit, the group to describe, events for the barrier.
// Beneath it are the lease of each role (lease.go), the commit gate that keeps one commit in flight
// (commitgate.go), the hand-over rule (handover.go), the heartbeat record (heartbeat.go), the
// judgement of a description of the group (judge.go) and the group timing the lease argument rests
// on (timing.go).
//
// The package starts no goroutine, shares no lock with I/O, reads the time only through the Clock
// it is given, and imports no Kafka client. Two shells run it: goneli's driver (internal/driver,
// driver.go), which carries librdkafka's, kgo's and the producer's events in and the effects out;
// and the simulation (sim_*_test.go here), whose models of librdkafka, Apache Kafka's group
// coordinator and the network do the same on a virtual clock under adversarial schedules. What the
// driver does besides, in time (its alarm goroutine, the waits inside the rebalance callback, the
// replacement of a client), is in docs/testing.md with what the simulation sees of it.
package core
