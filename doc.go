// Package goneli elects one leader among the processes of a service using nothing but Apache
// Kafka, following the Fast NELI protocol: every contender joins one consumer group on a leader
// topic, and the member that the group coordinator assigns partition 0 is the leader.
//
// # Protocol
//
// The assignee of partition 0 starts a tenure (a random id). Every MinPollInterval it produces a
// heartbeat to partition 0 naming itself, its tenure, a sequence number and its send time, and it
// reads partition 0 back. When one of its own heartbeats of the current tenure comes back, it
// stores the heartbeat's offset, and the consumer commits it to the group coordinator, which
// checks the member id and generation. A commit that the coordinator accepts renews the lease
// until the heartbeat's send time plus HeartbeatTimeout. The first renewal of a tenure delivers
// LeaderAcquired; a lease that runs out, a rejected commit or a lost assignment delivers
// LeaderFenced; the end of the tenure delivers LeaderRevoked.
//
// # Guarantees
//
// At most one instance's IsLeader returns true at any instant, under crashes, process pauses,
// network cuts and broker outages, on four assumptions:
//
//   - Clock rates. The contenders and the group coordinator measure time at the same rate, to well
//     within the margin between HeartbeatTimeout and the session timeout (by default 10% would
//     be safe). Wall-clock agreement is not needed: leases run on the monotonic clock. A host
//     that suspends stops that clock, and is not covered.
//   - librdkafka sends its group heartbeats every heartbeat.interval.ms on the same coordinator
//     connection as its offset commits.
//   - The coordinator expels a member no sooner than its session timeout after the last group
//     heartbeat it received from it, or the rebalance timeout (max.poll.interval.ms) after a
//     rebalance began that the member did not rejoin. Kafka and kfake both behave so. A broker
//     that restarts and forgets its groups expels everyone at once, and is covered only if it
//     stays down for longer than a lease.
//   - In a rebalance, the coordinator stops accepting the member's commits (and librdkafka stops
//     sending them) within about a heartbeat interval of the rebalance starting, so the lease
//     runs out long before the rebalance timeout.
//
// The argument: a renewal rests on a commit that reached the coordinator after the heartbeat was
// sent, so the coordinator heard from the member at most one heartbeat interval before that send
// time and cannot expel it for a session timeout after. goneli derives the session timeout as
// twice HeartbeatTimeout and the heartbeat interval as a tenth of it, and refuses overrides that
// leave less than HeartbeatTimeout plus two heartbeat intervals, so a lease always runs out before
// a successor can be assigned.
//
// Fencing tokens (Curator.Token) strictly increase while partition 0's log is kept; a log that
// restarts (lost broker data, an unclean leader election, a recreated topic) restarts them too.
//
// Not guaranteed: that leader work stops when the lease does. A task that checked IsLeader and
// was then paused (a GC pause, SIGSTOP, a slow system call) for longer than the remaining lease
// runs on while a successor leads. Keep each unit of leader work short, re-check IsLeader between
// steps, and where a downstream system must refuse a deposed leader, fence it there.
//
// # Liveness
//
// After a graceful Close, a successor is elected about one group heartbeat interval later. After
// a crash or a network cut it takes about one session timeout. An instance that stops pulsing
// loses its lease after HeartbeatTimeout (IsLeader turns false and the barrier receives
// LeaderFenced from a watchdog goroutine) and leaves the group after max.poll.interval.ms.
//
// # Cost
//
// A follower runs one librdkafka consumer and is polled every MinPollInterval; it opens no
// producer and fetches nothing, because it owns no partition. The leader adds one producer (opened
// on its first assignment and kept), one heartbeat per MinPollInterval and one offset commit per
// confirmed heartbeat.
package goneli
