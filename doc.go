// Package goneli elects one leader among the processes of a service using nothing but Apache
// Kafka, following the Fast NELI protocol: every contender joins one consumer group on a leader
// topic, and the member that the group coordinator assigns partition 0 is the leader. NewRoles
// elects a leader for each of several roles at once, role i being partition i; everything below
// holds for each role on its own, partition 0 standing for the role's partition.
//
// # Protocol
//
// The assignee of partition 0 starts a tenure (a random id). Every RenewInterval (a tenth of
// HeartbeatTimeout by default) it produces a heartbeat to partition 0 naming itself, its tenure, a
// sequence number and its send time, and it reads partition 0 back. When one of its own heartbeats of the current tenure comes back, it
// stores the heartbeat's offset, and the consumer commits it to the group coordinator, which
// checks the member id and generation. A commit that the coordinator accepts renews the lease
// until the heartbeat's send time plus HeartbeatTimeout. Before an instance first leads in a
// membership of the group, it also describes the group and holds back while any member holds a
// partition of another topic (see GroupConflictError). The first renewal of a tenure delivers LeaderAcquired; a lease that
// runs out, a rejected commit or a lost assignment delivers LeaderFenced; the end of the tenure
// delivers LeaderRevoked. Until its first renewal a tenure sends a heartbeat every MinPollInterval
// and its instance polls every couple of milliseconds, for at most one HeartbeatTimeout, so that
// the proof takes about one produce, one fetch and one commit round trip rather than several poll
// intervals.
//
// A leader sees a renewal take effect up to two MinPollIntervals after it sent the heartbeat, plus
// round trips: one poll reads the heartbeat back, the next sees its commit accepted. Heartbeats go
// out on polls, so one follows RenewInterval rounded up to a whole number of MinPollIntervals after
// the last. After each renewal a leader therefore holds HeartbeatTimeout less up to two
// MinPollIntervals and a round trip, and renewals take effect up to RenewInterval + 2 x
// MinPollInterval apart. Validate requires HeartbeatTimeout to be at least 2 x RenewInterval + 2 x
// MinPollInterval (RenewInterval rounded up so), which a healthy leader outlasts with a renewal to
// spare: settings that left no such margin fenced a healthy leader at nearly every renewal. At the
// default intervals (RenewInterval a tenth of the lease, MinPollInterval at most a twentieth) a
// leader holds at least nine tenths of the lease, less a round trip, after each renewal, and
// survives at least five lost or refused renewals in a row (seven at a 1 s lease, eight at the
// default 5 s), and a rebalance that stops renewals for most of a lease. Renewing more often buys
// nothing for safety (the lease always ends HeartbeatTimeout after the send time of the last
// heartbeat whose commit was accepted); renewing less often leaves less slack for rebalances.
//
// A tenure revoked in a rebalance while its barrier still has LeaderRevoked writes a releasing
// marker to its partition before letting the partition go, and a released marker once the barrier
// has returned. A new tenure reads the last few records of its partition, and does not lead while
// a predecessor is releasing, for up to the rebalance timeout. So a barrier that finishes
// in-flight work holds back its role's successor, as the v0.5.0 barrier contract says, without
// holding up the rebalance, the group, or this instance's other roles. If the marker cannot be
// written within HeartbeatTimeout/2, the revocation is held back instead, as a rebalance would be.
//
// # Guarantees
//
// At most one instance's IsLeader returns true at any instant, under crashes, process pauses,
// network cuts and broker outages, on four assumptions:
//
//   - Clock rates. The contenders and the group coordinator measure time at the same rate, to well
//     within the margin the session timeout keeps beyond HeartbeatTimeout and two group heartbeat
//     intervals (by default 4% of the session). Wall-clock agreement is not needed: leases run on the monotonic clock. A host
//     that suspends stops that clock, and is not covered.
//   - librdkafka sends its group heartbeats every heartbeat.interval.ms on the same coordinator
//     connection as its offset commits.
//   - The coordinator expels a member no sooner than its session timeout after the last group
//     heartbeat it received from it, or the rebalance timeout (max.poll.interval.ms) after a
//     rebalance began that the member did not rejoin. Kafka and kfake both behave so. A broker
//     that restarts and forgets its groups expels everyone at once, and is covered only if it
//     stays down for longer than a lease.
//   - librdkafka learns of a rebalance at its next group heartbeat and auto-commits nothing until
//     the rebalance is over; it rejoins at once, or up to a second later if it joined within the
//     last second, and the coordinator holds its JoinGroup until the rebalance completes, which
//     holds back every later request on that connection. The coordinator accepts a commit with
//     the current generation until then, and while librdkafka waits to rejoin goneli sends the
//     stalled offsets' commits itself. Such an explicit commit renews only a heartbeat sent within a
//     window after the anchor, the moment the newest offset that an automatic commit got accepted
//     was stored (commitWindow: the rebalance timeout, max.poll.interval.ms, less HeartbeatTimeout,
//     two group heartbeat intervals, the answer bound below and the longer of that bound and a
//     RenewInterval, since the commit gate stores the next offset only once the commit under way
//     is answered, or once it is presumed never sent, a store after such presumptions anchoring
//     where the first of them would have; nothing if the
//     settings leave no room; under KIP-848 the shorter of the session and rebalance timeouts stands
//     for the rebalance timeout, since there commits renew no session; at leases under 750 ms,
//     whose classic rebalance timeout is raised to 1.5 s for librdkafka's join pace (Liveness),
//     twice the lease does, which only narrows the window). The offset was stored
//     before the commit went out, so the anchor is never later than the commit's acceptance,
//     however late a paused poll loop sees its result. librdkafka shows goneli neither its group
//     heartbeats nor their answers, but the broker answers a connection's requests in order, and
//     the commits of the offsets a leader stores every renewal share the heartbeats' connection: a
//     commit whose answer is seen more than the answer bound after its offset was stored (an
//     auto-commit interval, a MinPollInterval and a group heartbeat interval) shows that answers,
//     the heartbeats' among them, were held back, and from then no commit renews a heartbeat sent
//     after that offset was stored until an offset stored since the last late answer has had its
//     answer in time, and a heartbeat interval after that offset's store (lease.heldAnswers): time
//     alone ends no hold, since the answers of a slow link, delivered in order, may still be on
//     their way.
//     So for a rebalance that begins at R and that the member does not rejoin, the anchor is at
//     most R + hb + answer + max(renew, answer), and an explicit renewal's lease ends by
//     R + expel - hb, where hb is the group heartbeat interval, answer the answer bound, renew the
//     RenewInterval and expel the
//     rebalance timeout after which the coordinator removes the member (a classic coordinator
//     renews the session of a member with every commit it accepts, Apache Kafka's
//     OffsetMetadataManager says): a heartbeat interval before the removal, the slack for what the
//     clocks drift apart over expel. The same holds keep a lease from outliving, under KIP-848, a
//     session that only the group heartbeats keep there. librdkafka also ignores a rebalance's
//     news while it waits for the application to take an assignment, and counts as steady once it
//     has: so after an assignment taken more than the answer bound after goneli last found its
//     queue empty (whatever came between: a paused loop, or the rebalance callback's own wait for
//     the partitions' ends), or that followed as long without a commit, the leases hold their
//     renewals back the same way until the answer bound has passed since it was taken, and no
//     offset stored meanwhile anchors the window, whenever its heartbeat was sent
//     (internal/core, Machine.heldAssignment).
//     Explicit commits also stop after one of
//     them waited longer than an interval for its answer, until an automatic commit is accepted
//     outside such a hold. At the default timing the window is 2.748 s (476 ms at a 1 s lease), which
//     rode out librdkafka's wait of up to a second to rejoin at leases from about 0.8 s up before
//     the commit gate narrowed it (not measured since); at
//     shorter leases that wait can still fence a leader, which leads again once the rebalance ends.
//     One qualification: while the coordinator is unreachable
//     librdkafka queues its auto-commits (as many as goneli stored: one at a time, and another
//     only once the first is presumed never sent), and on reconnecting sends them right after its
//     first group heartbeat, before that heartbeat's answer can tell it of a rebalance. What then keeps
//     a late commit from renewing a lease the group has moved on from is librdkafka's own session
//     timeout, which revokes the assignment no later than the coordinator could expel the member,
//     provided max.poll.interval.ms is at least session.timeout.ms (goneli derives it as twice
//     the lease, and refuses one below the session).
//     The three-broker chaos kind leave-cut aims at that margin, which can be as short as a
//     heartbeat interval; it found no overlap in 16 faults.
//
// The argument: a renewal rests on a commit that reached the coordinator after the heartbeat was
// sent, so the coordinator heard from the member at most one heartbeat interval before that send
// time and cannot expel it for a session timeout after. goneli derives the heartbeat interval as a
// tenth of HeartbeatTimeout (within 100 ms and 3 s) and the session timeout as HeartbeatTimeout
// plus two heartbeat intervals plus a margin of a twentieth of HeartbeatTimeout (SessionTimeout:
// 6.25 s at the default lease, 1.25 s at 1 s), raised to the broker's group.min.session.timeout.ms
// where New can read it and to Kafka's default minimum, 6 s, where it cannot (a longer session only
// keeps the leader longer after its lease ran out), and refuses overrides that leave less than HeartbeatTimeout plus two
// heartbeat intervals, so a lease always runs out before a successor can be assigned. One interval
// covers the time between the member's last group heartbeat and the heartbeat's send time, one is
// slack for the group heartbeat on the wire; delivery delays only help (a renewal is measured from
// the send time, the coordinator's session from when it heard the member), and the margin covers
// clocks whose rates differ by up to 4%, a hundred times what NTP lets a clock drift. Under the
// KIP-848 consumer protocol (group.protocol=consumer) the broker sets both, and New enforces the
// same condition on them, margin included: the group's session timeout (the group's own
// consumer.session.timeout.ms where one is set for it, else the smallest
// group.consumer.session.timeout.ms among the brokers) must be at least HeartbeatTimeout plus twice
// the group heartbeat interval (consumer.heartbeat.interval.ms, else the largest
// group.consumer.heartbeat.interval.ms) plus the margin, or New fails with a ConfigError naming
// the values. Since an operator can lower them while instances run, every tenure reads them again
// before it leads, and again after each fence, and does not lead while they no longer cover the
// lease. What cannot be told is not guessed: a group whose config resource the principal may not
// describe may set a session far shorter than the brokers' default, so where the broker refuses
// what would tell (DescribeConfigs on the group, or on the cluster for a group that sets none of
// its own), New fails with an error naming the grant, and where it merely could not be read New
// warns and no tenure leads until it can be (internal/driver, session848.go, "Unknown means unknown"). Commits renew no session under KIP-848 (only ConsumerGroupHeartbeat does, in
// Apache Kafka; kfake renews it on commits too, which kafkatest.AsKafka corrects), so the argument
// above rests on the group heartbeats alone, which librdkafka sends whatever the rebalance.
//
// An accepted commit proves membership of the current generation, not ownership of partition 0:
// the coordinator does not check which partitions a member owns. Members of one group that use
// different leader topics are each assigned partition 0 of their own topic, and every one of them
// would pass. goneli closes that gap with the group check, made once per membership of the group:
// when a member first holds a partition in a membership (a member id the coordinator gave it), it
// describes the group and leads only if no member holds a partition of another topic. It checks
// again only after it may have been invisible to a later member's check: under a new member id
// (expelled, or left to yield), after a lost assignment, or after a generation in which it held no
// partition. So of two members on different topics that both passed, the later check was made
// while the other held a partition of its topic, saw it, and did not lead. One check per
// membership rather than per tenure also keeps the description away from the rebalances that broker
// restarts cause, which matters where it still goes through librdkafka (below).
// The check fails closed: a partition whose topic the description does not name counts against
// leading unless it is the instance's own. Apache Kafka names every topic it describes; kfake, under
// KIP-848, gives topic IDs only, which confluent-kafka-go does not pass on, so there a member leads
// only while no other member holds a partition (enough for a leader topic of one partition).
// The same check refuses members whose role lists differ: an instance made by NewRoles ends its
// consumer's client.id with a digest of its list, and a member with another digest (or none, as
// New's single leader has) is treated as one on another topic, since two lists could name the same
// role for different partitions. Static membership (group.instance.id) is refused, because it lets
// a replacement take over a member's partitions at once, without the session timeout that the
// argument needs.
//
// Fencing tokens (Curator.Token, Role.Token) strictly increase per role while the role's partition
// log is kept; a log that restarts (lost broker data, an unclean leader election, a recreated
// topic) restarts them too.
//
// Not guaranteed: that leader work stops when leadership does. A task that checked IsLeader and
// was then paused (a GC pause, SIGSTOP, a slow system call) runs on while a successor leads if the
// pause outlasts the rest of the lease or, after a voluntary hand-over (Close, Yield, TransferTo, a
// priority hand-over, a rebalance that moves the role), the barrier's return from LeaderRevoked:
// the successor waits for the released marker written once the barrier has returned, not for the
// old lease to run out, and may lead well within it. Run and RunRoles return from their barrier
// only once the task has; with Background or a barrier of your own, make the barrier wait for the
// work. Keep each unit of leader work short, re-check IsLeader between steps, and where a
// downstream system must refuse a deposed leader, fence it there.
//
// Given a member that can renew, a role whose assignee cannot (it keeps its group session, but its
// heartbeats or their read-back are too slow or lost) gets another leader within about two and a
// half leases, two leases and a rebalance, at the default Config.HandOverAfter: see Liveness.
//
// Run and RunRoles give leader work a context that is cancelled when the barrier hears of the
// fence or revocation. That is as prompt as the watchdog (milliseconds after the lease runs out),
// but work that ignores its context, or is paused, runs on just the same: the context tells the
// work when to stop, it cannot stop it.
//
// # Observing
//
// Followers with ObserveLeader, Watch and Describe learn who leads (and Config.Address, where
// to reach the leader) from the heartbeats on the leader topic. What they report rests on the
// leader's wall clock and is for routing and display, never for deciding who may act: a follower
// may report a leader a moment after its lease ran out, or a new leader a heartbeat late.
//
// # Liveness
//
// After a graceful Close, a successor is elected within about one group heartbeat interval (a
// tenth of HeartbeatTimeout): the leader's LeaveGroup goes out within milliseconds of Close, every
// other member learns of the rebalance at its next group heartbeat, and the new assignee proves its
// lease in a few round trips. Two things can add up to a second to that, both measured on Apache
// Kafka 4.4 (internal/realkafka/realtest): librdkafka sends a member's JoinGroup at most once a
// second, so under the classic protocol a Close within a second of the last rebalance waits for the
// others' next one; and under KIP-848 a coordinator of Kafka 4.3 or later computes assignments in
// batches, group.consumer.assignment.interval.ms apart (1 s by default; 0 computes each at once).
// After a crash or a network cut it takes about one session timeout. The same once-a-second pace
// is why the classic rebalance timeout (max.poll.interval.ms) is at least 1.5 s whatever the lease:
// at a rebalance timeout of a second a member whose rejoin the pace held back could be expelled
// for it, and then waits two seconds more to join again. An instance that stops pulsing
// loses its lease after HeartbeatTimeout (IsLeader turns false and the barrier receives
// LeaderFenced from a watchdog goroutine) and leaves the group after max.poll.interval.ms.
//
// An assignee can also keep its group session and still be unable to renew: a slow or lossy path to
// the broker that leads the leader topic's partition while the coordinator is another broker, a
// producer stuck on stale metadata, every packet delayed by a few hundred milliseconds. The group
// watches only the session and would leave it the partition for as long as that lasts. So an
// instance that has owned a role's partition without leading it for Config.HandOverAfter (one lease
// by default, twice that for a tenure that has yet to lead; Stats.NotLeadingSince) hands over,
// provided its own heartbeats do not come back within a quarter lease of their sending (one whose
// heartbeats come back but whose commits wait is held up by a rebalance, which ends by itself and
// would hold a successor up as much, and the time in which they came back promptly does not count
// toward HandOverAfter, so that a stall of the instance's own after such a hold, up to half a lease
// in the rebalance callback while it reads the ends of the partitions it is given, does not make
// it hand over): it leaves the group as Yield does, and a member that can
// renew is elected at the rebalance that its LeaveGroup starts (for the lease before that, it
// stores no heartbeat offset for commit, so that no commit in flight holds its LeaveGroup back:
// handover.go). Its lease ran out a lease after the
// heartbeat behind its last renewal was sent, so the role is without a leader for about two leases
// and a rebalance: measured at a 1 s lease with the leader's heartbeats each held 400 ms, a new
// leader 2.2-2.6 s after the fault began in 37 runs of 42, and 3.3-4.1 s in the others, where the
// rebalance took up to 1.9 s on a machine that other tests were loading (TestSlowLeaderHandsOver).
// The instance contends again after a back-off of two leases that doubles with each hand-over
// following the last without a tenure that led for four leases in between, up to sixteen leases,
// and the sticky assignment leaves the role with its new leader when it returns: when every member
// is equally sick, the role moves at most a few times rather than at every lease. Leaving the group
// takes every role of the instance with it, so with roles a member that cannot renew one role gives
// up the others as well (LeaderRevoked), and they move to other members for the back-off. An
// instance cannot tell that it is alone in its group, and hands over all the same, to rejoin after
// the back-off; HandOverAfter can put that off.
//
// Under the classic group protocol every rebalance stops the leader's renewals until it completes.
// Most complete within milliseconds, but one that waits for a member that died without leaving
// lasts until that member's session times out (SessionTimeout, about 1.25 x HeartbeatTimeout), and
// the leader can be fenced before it ends: a follower that crashes, freezes or is cut off, followed
// by any join before its session ends, can cost the rest of that session without a leader
// (measured with a 3 s lease and the session of twice the lease that goneli derived before: fenced
// 3.2 s after the join, a new leader 2.8 s later). The classic protocol offers no safe
// proof of ownership while the leader's own JoinGroup is held by the coordinator. The KIP-848
// consumer protocol (KafkaConfig["group.protocol"]="consumer", Kafka 4.0 or later) has no such
// barrier: there the leader renewed throughout.
//
// librdkafka also sends at most one JoinGroup per member per second. A rebalance that begins
// within a second of the previous one (a rolling restart: one member leaves, its replacement joins
// a moment later) therefore lasts until a second after the previous one for every member, and
// librdkafka auto-commits nothing meanwhile. The leader renews through it on explicit commits, for
// heartbeats sent within the window above after its last automatic commit's offset was stored
// (2.748 s at the default lease, 476 ms at 1 s), which outlasted the wait at leases from about 0.8 s
// up before the commit gate narrowed it (not measured since); below that the leader can be fenced, and renews again once the rebalance completes. (Before
// the window was anchored at the offset's store time and measured against the rebalance timeout it
// was the session's margin, a twentieth of the lease, and the benchmark at HeartbeatTimeout=1s saw
// such a fence in about one trial in five.) That is when the wait is the leader's own. When it is
// another member's (one that joined a moment before), the coordinator holds the leader's
// JoinGroup, and the explicit commits behind it on the same connection, until that member's
// JoinGroup comes, and no commit renews meanwhile: a 1 s lease ran out 143 times in 160 such joins
// (docs/safety.md gives the bound).
//
// librdkafka keeps, for a client's life, the highest leader epoch it has seen for each partition
// and ignores metadata that names an older one (confluentinc/librdkafka#4898). A leader topic that
// is deleted and recreated, by an operator or by brokers that lost their data, starts again at
// epoch 0, perhaps on another broker, and a handle that learnt the old epoch keeps sending to a
// broker that no longer leads the partition. goneli replaces the heartbeat producer when it has
// delivered nothing for a lease, and leaves the group and rejoins through a new consumer when a
// tenure has read back no own heartbeat for two leases while the producer delivers (an instance
// does so at most once per four leases). Neither can give two leaders: a tenure that cannot prove
// its lease does not lead, and a rejoin is a new membership, checked again. After a recreation on
// three brokers the group leads again about two leases later (TestLeaderTopicRecreated: 2.04-2.07 s
// with a 1 s lease). The leader observer (ObserveLeader) keeps its consumer.
//
// librdkafka 2.11.1, which confluent-kafka-go v2.11.1 bundles, aborts the process when a
// coordinator-bound admin request cannot be sent because that broker's connection has just
// dropped: an assertion in its admin client fails after a use-after-free
// (confluentinc/librdkafka#4605; a fix is proposed upstream, not released). So goneli asks
// librdkafka for no such request where it can help it: the group check (New's, each membership's)
// and Describe describe the group over goneli's own connection (internal/sidechan: franz-go's kgo
// client, one per instance), in the Kafka protocol, with the clients' client.id and security
// settings (PLAINTEXT; SSL with PEM certificates and unencrypted keys; SASL PLAIN, SCRAM-SHA-256
// and SCRAM-SHA-512). A connection that drops fails that check, which is retried. Settings it
// cannot follow (GSSAPI, OAUTHBEARER, a keystore, an encrypted key, an engine, a revocation list)
// leave the check to librdkafka's admin client, and New logs so; so does a TLS handshake that
// fails for a reason of TLS rather than of the network, as with brokers whose TLS OpenSSL accepts
// and Go's crypto/tls does not (a host named only in the subject's CN, a certificate Go cannot
// parse such as one with a negative serial number, a listener offering only TLS_RSA_* suites), from
// the first connection that meets it, for the instance's life; and so does any other way in which
// the connection cannot do what librdkafka does: when its group checks have failed for a
// HeartbeatTimeout while librdkafka's commits were accepted (internal/driver, sidefail.go), the
// session reads of KIP-848, the heartbeats and the tails go through librdkafka too from then on.
// (A heartbeat that the connection fails to write goes to librdkafka at once, and the next ones
// go there for a lease, longer after rounds that no broker answered.) There the check is sent once per membership
// and not within a second of a failed broker connection (for at most ten seconds), and an abort
// stays possible. The group handles an abort as a crash, so it costs a failover, not safety: run
// contenders under a supervisor that restarts them, as Kubernetes and systemd do.
//
// A follower that cannot reach Kafka looks like a healthy follower to Pulse, which returns
// (false, nil) either way. Stats tells them apart: UnreachableSince and UnreachableReason are set
// from librdkafka's report that every broker connection is down (or New's failed metadata request)
// and cleared by the next answer; an instance marked unreachable probes with a metadata request
// every RenewInterval until one comes. New fails with a NotKafkaError when the bootstrap servers
// accept connections but do not answer a Kafka request (they answer otherwise, or stay silent),
// after its metadata request has waited one HeartbeatTimeout and each server up to two seconds
// more: at the default lease, seven seconds for one server. neli gives up on such a server in five.
//
// # Preferred leaders
//
// Config.Priority says which contenders should lead: among the members of the group, one of the
// highest priority. goneli cannot tell the group coordinator whom to assign partition 0; it
// arranges who is next in line, and who gives way.
//
// Next in line. Under the classic protocol the assignment is computed by librdkafka in one of the
// members. Its cooperative-sticky assignor gives a partition that has no owner to the member that
// holds the fewest partitions, ties broken by member id in byte order (librdkafka 2.11.1,
// rdkafka_sticky_assignor.c: maybeAssignPartition walks the members as
// sort_by_map_elem_val_toppar_list_cnt orders them), and Apache Kafka makes a classic member id of
// the client.id, a dash and a random UUID (ClassicGroup.generateMemberId). goneli therefore puts
// the priority at the front of the client.id: goneli--<1000-p>-<Name> above 0, goneli-zz<-p>-<Name>
// below, and goneli-<Name> at 0, as before priorities (ClientID). Higher priorities sort first, so
// whenever partition 0 changes hands (its leader closes, crashes, yields or hands over) it goes to
// a member of the highest priority in the group, in that one hand-over. Among equal priorities the
// order is the Names', as it always was. A Name that itself begins with '-' or "zz" sorts among the
// priorities, and a client.id set in KafkaConfig takes no part (Validate refuses it with a non-zero
// priority). Quotas or ACLs set for goneli-<Name> do not apply to an instance with a priority.
//
// Giving way. Cooperative-sticky leaves partition 0 with its owner when members join. So a leader
// describes the group after each rebalance (every classic rebalance ends with an assignment
// callback for every member, the leader included, even with nothing new for it), which costs
// nothing while the group is quiet, and when a member of higher priority has been in the group for
// the settle time, two HeartbeatTimeouts, under one member id, the leader hands over: it leaves the
// group as Yield does, and the member next in line, one of the highest priority, is assigned the
// partition. (These descriptions go over goneli's own connection, as the group check's do; where
// that cannot speak the clients' settings they go through an admin client of their own, never within
// a second of a failed broker connection, and librdkafka#4605, below, applies to them.) The
// leader must also have led for the settle time, so a role changes hands for priority
// at most once per settle time. A member that crashes and restarts, or joins and leaves, comes back
// under a new member id and starts its settle time again: it never pulls leadership. "Healthy" here
// means that the member kept its group session for the settle time; whether it can renew a lease
// nobody knows until it leads, and one that cannot hands over again after Config.HandOverAfter, to
// return, settle and pull once more after its back-off, which doubles up to sixteen leases: a
// preferred member with a gray failure costs a hand-over per settle time plus back-off, where
// without priorities it would cost nothing.
//
// The member that handed over stands by: it stays out of the group while a member of higher
// priority is in it, describes the group once per HeartbeatTimeout, and rejoins once none is
// (Stats.Standby). The single leader would not need that under the classic protocol, whose assignor
// keeps partition 0 with its new owner when the old one returns, but roles do (cooperative-sticky
// spreads roles over every member, and would give roles back to a returning member of lower
// priority), and so does KIP-848. An instance of several roles that starts while a member of higher
// priority is in the group stands by from the start. So among equal priorities the roles spread as
// they always have, and a member of lower priority holds none while one of higher priority is in
// the group. A negative priority is the same rule: such a member is last in line, and gives way to
// any member of priority 0 or more, so it leads only when no other member is left. Equal priorities
// never move leadership.
//
// Under the KIP-848 consumer protocol (group.protocol=consumer) the broker assigns partitions and
// member ids are random UUIDs that carry no client.id (librdkafka 2.11.1 draws one for its member,
// rdkafka_cgrp.c, rd_kafka_cgrp_new; Apache Kafka's GroupMetadataManager draws one for a member
// that comes without), so nothing is next in line: a hand-over for priority is a yield, and
// the broker's assignor picks the successor. A successor of lower priority than some member hands
// over in turn a settle time later, and each member that hands over stands by, so leadership
// reaches a member of the highest priority after at most as many hand-overs as there are members
// below it, one settle time apart. A member's session there lives on its own heartbeats, so a leader
// describes the group every half settle time instead of after rebalances. TestConsumerProtocolPriority
// shows it on the embedded broker.
//
// # Transfers
//
// Curator.TransferTo(name) moves leadership to a member of one's choosing, and Transfer (`neli
// transfer`) asks the leader to from outside the group, with a request record on the role's
// partition that the leader reads with its heartbeats and acts on only if it reads it while it
// leads (so only a request written after its tenure began). The leader checks with a fresh
// description that the member is in the group and that no member outranks it, then leaves the group
// as Yield does; its release markers name the target. Members whose member ids sort before the
// target's are assigned the partition first: each reads the marker among the last records of the
// partition before its own first heartbeat comes back, holds its tenure as it would for a
// predecessor that is releasing, checks with a description that the target is still in the group,
// and passes the partition on, leaving the group without having led. Every member that left stays
// out long enough for the partition to reach the target. A target that has gone by then ends the
// chain: the member that finds it gone leads. So the successor is the target, or, if the target
// died during the transfer, the member next in line after it, within a session timeout plus a
// hand-over per member in the chain. The same chain carries a transfer under KIP-848, whatever order
// the broker assigns in. Roles cannot be transferred one at a time (ErrRolesTransfer): a role is
// given up only by leaving the group with all of them, and cooperative-sticky, which balances roles
// over the members, would move a role sent to one member back to another when the members that
// left return.
//
// Neither a hand-over for priority nor a transfer can give two leaders: each is a revocation like
// any other. The leader stops leading (LeaderRevoked) before it leaves the group, and its release
// markers hold a successor back until its barrier has returned; a member leads only after the group
// assigned it the partition, it proved its own lease (its heartbeat read back and committed under
// its own membership, the argument of Guarantees) and its group check passed; a member that passes
// a transfer on never leads. If the markers cannot be written in time the revocation is held back
// instead, as for any revocation, and a transfer then lands on the member next in line.
//
// What they cost is rebalances and leaderless gaps. A hand-over for priority is one LeaveGroup and
// its rebalance, with the usual gap of a group heartbeat interval and a proof of the lease, and the
// member that handed over causes one more rebalance when it rejoins (when the preferred member has
// gone), but none meanwhile. A transfer costs one more rebalance, and about a second (librdkafka
// sends at most one JoinGroup a second), per member it passes through. In the benchmark's rolling
// upgrade at a 5 s lease, a member of the new version started, settled and led about 11 s later,
// with a leaderless gap of a few hundred milliseconds (docs/performance.md).
//
// A member that leaves the group must also be gone from it before it rejoins. librdkafka sends one
// LeaveGroup when the consumer unsubscribes and does not send it again if the coordinator refuses it
// (rdkafka_cgrp.c, rd_kafka_cgrp_handle_LeaveGroup); a coordinator that has just moved and still
// loads the group refuses it with COORDINATOR_LOAD_IN_PROGRESS, and the member stays in the group
// without heartbeats until its session times out. A member that rejoined meanwhile would sort where
// its old membership did, and be given partition 0 straight back when that expires. So after Yield,
// a hand-over of any kind or a transfer, an instance stays out past its yield until a description
// of the group no longer lists the member id it left (for at most a rebalance timeout and a lease),
// which normally takes one description, made while the yield lasts.
//
// # Cost
//
// A follower runs one librdkafka consumer and waits in its poll for up to a group heartbeat
// interval at a time (the poll returns as soon as an assignment arrives); it opens no producer
// and fetches nothing, because it owns no partition. The leader adds one producer (opened
// on its first assignment and kept), one heartbeat per RenewInterval, one fetch that returns with
// it (fetch.wait.max.ms is twice the renewal interval, within 100 ms to 1 s and at most a third of
// the lease, so a leader's fetch rarely comes back empty) and one offset commit per confirmed heartbeat. At the defaults a group of
// three sends the broker about two produce, fetch and commit requests a second each, plus two group
// heartbeats a second per member.
//
// A consumer has one offset commit in flight at a time, librdkafka's or goneli's own, however
// slowly the coordinator answers: a heartbeat's offset is stored only while no commit is under way,
// and withdrawn before librdkafka's auto-commit timer could send it a second time (commitgate.go
// gives the argument), and one round of heartbeats is produced at a time. A slow broker therefore
// gets fewer requests, not more, and the leader renews once per commit round trip: it keeps its
// lease while the time a heartbeat takes to come back plus two commit round trips stays well
// within HeartbeatTimeout. On the embedded broker answering every request 400 ms late (a
// connection's requests one at a time, as Kafka serves them) leaders at the default lease kept at
// least 1.1 s of it; at 1 s per request, with a commit queued behind a group heartbeat on the
// coordinator's connection, they did not. With roles, an instance still runs one consumer and one producer whatever
// the number of roles; each role it leads adds its heartbeats to that producer and its offsets to
// the same commits. A leader describes the group once after each rebalance to follow the
// members' priorities (under KIP-848, every half settle time), a member that left the group once
// after leaving it, and a member standing by once per HeartbeatTimeout (Stats.GroupDescriptions).
package goneli
