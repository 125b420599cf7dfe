package driver

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goneli/goneli/internal/core"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// # Preferred leaders
//
// Config.Priority says which contenders should lead: among the live members of the group, one of
// the highest priority. Two things carry it out.
//
// Who the group assigns partition 0. goneli uses librdkafka's cooperative-sticky assignor
// (the root package's config.go). When partition 0 has no owner (its owner left the group, or the group is new), the
// assignor gives it to the member that holds the fewest partitions, ties broken by member id in
// strcmp order: maybeAssignPartition walks sortedCurrentSubscriptions, which
// sort_by_map_elem_val_toppar_list_cnt orders by partition count and then by member id
// (librdkafka v2.11.1, src/rdkafka_sticky_assignor.c:506-565, called from balance() at 1136-1218).
// With one partition every remaining member holds none, so the member id decides. Apache Kafka
// makes a classic member id the client.id, a dash and a random UUID (ClassicGroup.generateMemberId,
// group-coordinator/src/main/java/org/apache/kafka/coordinator/group/classic/ClassicGroup.java:775,
// called from GroupMetadataManager.java:4162). So goneli puts the priority at the front of the
// client.id, after "goneli-", in an encoding whose strcmp order is the reverse of the priorities'
// (clientIDFor): the member of highest priority is next in line whenever partition 0 changes hands,
// in one hand-over, and among equal priorities the order is today's, the Name's. Priority 0 keeps
// today's client.id, goneli-<Name>, exactly.
//
// Who gives it up. The sticky assignor leaves partition 0 where it is when members join, so a
// leader of lower priority hands over when a member of higher priority has been in the group for
// the settle time (prioritySettle): it leaves the group as Yield does, and the assignor gives the
// partition to the preferred member. The leader learns of such a member from the client.ids in a
// description of the group, which it asks for after each rebalance (every member, the leader
// included, takes part in every classic rebalance and librdkafka ends each with an assignment
// callback, possibly empty: rdkafka_cgrp.c:4720-4735 and rd_kafka_rebalance_op_incr at 1215), so a
// joiner is seen within a round trip of its join and nothing is asked while the group is quiet.
// Under the KIP-848 consumer protocol a member hears only of changes to its own assignment, and
// the leader describes the group every half settle time instead.
//
// The settle time is what keeps this from flapping: a member must have kept one member id (one
// unbroken session) for it, as seen by the leader, and the leader must have led for it, so that a
// role changes hands for priority at most once per settle time, and a contender that crashes and
// restarts, or joins and leaves, never pulls leadership.
//
// A member that handed over stands by (priorityStandby) out of the group while a member of higher
// priority is in it, rejoining once none is. That is not needed for the single leader under the
// classic protocol, whose assignor keeps partition 0 with its new owner, but it is for the two
// cases where the assignor decides otherwise: roles, which cooperative-sticky spreads over every
// member (so a lower-priority member back in the group would be given roles again), and KIP-848,
// whose member ids are random UUIDs, drawn by librdkafka (v2.11.1 src/rdkafka_cgrp.c:519-522) or
// the coordinator (GroupMetadataManager.java:1744) without the client.id, and whose assignment the
// broker makes.

// MaxPriority and MinPriority are goneli's, which bound Config.Priority.
const (
	MaxPriority = 999
	MinPriority = -999
)

var unsafeNameChars = regexp.MustCompile(`[^a-zA-Z0-9._\-]`)

// Sanitise is goneli.Sanitise: name with every character outside [a-zA-Z0-9._-] replaced by an
// underscore.
func Sanitise(name string) string {
	return unsafeNameChars.ReplaceAllString(name, "_")
}

// prioritySettle is how long a member of higher priority must have been in the group, under one
// member id, before the leader hands over to it, and how long a tenure must have led before it
// hands over for priority: two leases. A member that was just started is often restarted again
// (a crash loop, a canary that fails its checks), and a leader elected a moment ago has just cost
// its role a hand-over; two leases are long next to the time a hand-over takes (a group heartbeat
// interval plus a lease proof) and short next to an upgrade's pace.
func prioritySettle(lease time.Duration) time.Duration {
	return 2 * lease
}

// ClientIDFor is the client.id goneli derives from Config.Name and Config.Priority. Priority 0
// gives goneli-<Name>, as before priorities; a positive one goneli--<1000-priority, 3 digits>-<Name>
// and a negative one goneli-zz<-priority, 3 digits>-<Name>, Name sanitised. In byte order '-' comes
// before every other character Sanitise keeps, and 'z' after, so higher priorities sort first,
// priority 0 sits between the two families whatever its Name (unless the Name itself begins with
// '-' or "zz", which Sanitise allows and which then sorts among them), and within a priority the
// Names keep their order.
func ClientIDFor(name string, priority int) string {
	s := Sanitise(name)
	switch {
	case priority > 0:
		return fmt.Sprintf("goneli--%03d-%s", 1000-priority, s)
	case priority < 0:
		return fmt.Sprintf("goneli-zz%03d-%s", -priority, s)
	}
	return "goneli-" + s
}

var (
	positivePriority = regexp.MustCompile(`^-([0-9]{3})-`)
	negativePriority = regexp.MustCompile(`^zz([0-9]{3})-`)
)

// SplitPriority reads a priority off the front of what follows "goneli-" in a client.id, and
// returns it with the rest (the sanitised Name). Without one it returns 0 and s.
func SplitPriority(s string) (int, string) {
	if m := positivePriority.FindStringSubmatch(s); m != nil {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			return 1000 - n, s[len(m[0]):]
		}
	}
	if m := negativePriority.FindStringSubmatch(s); m != nil {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			return -n, s[len(m[0]):]
		}
	}
	return 0, s
}

// ParseClientID undoes clientIDFor and the roles suffix (rolesSuffix): the sanitised Name and the
// priority of a member whose client.id goneli derived. ok is false for any other client.id, which
// counts as priority 0.
func ParseClientID(clientID string) (name string, priority int, ok bool) {
	rest, ok := strings.CutPrefix(clientID, "goneli-")
	if !ok {
		return "", 0, false
	}
	if i := strings.LastIndex(rest, core.RolesSuffix); i >= 0 {
		rest = rest[:i]
	}
	priority, name = SplitPriority(rest)
	return name, priority, true
}

// contender is a member of the group as a description shows it.
type contender struct {
	member, clientID string
	name             string // the sanitised Name; empty for a client.id that goneli did not derive
	priority         int
}

// contendersOf lists the members of a description, in member id order.
func contendersOf(desc kafka.ConsumerGroupDescription) []contender {
	out := make([]contender, 0, len(desc.Members))
	for _, m := range desc.Members {
		name, priority, _ := ParseClientID(m.ClientID)
		out = append(out, contender{member: m.ConsumerID, clientID: m.ClientID, name: name, priority: priority})
	}
	slices.SortFunc(out, func(a, b contender) int { return strings.Compare(a.member, b.member) })
	return out
}

// preference decides when a leader hands over to a member of higher priority. It is pure: the
// driver tells it what each description of the group showed and when (observe), and asks it
// whether to hand over (decide).
type preference struct {
	mine   int
	settle time.Duration
	// seen is when each member id was first seen in a description, by the end of that
	// description; a member id missing from a later one is forgotten, and a member that comes
	// back does so under a new id.
	seen map[string]time.Duration
	// last is the latest description's members other than this instance.
	last []contender
}

func newPreference(mine int, settle time.Duration) preference {
	return preference{mine: mine, settle: settle, seen: map[string]time.Duration{}}
}

// observe takes a description that ended at now; self is this instance's client.id, whose members
// (the current one, and a previous one the coordinator has yet to expel) are left out.
func (p *preference) observe(now time.Duration, self string, cs []contender) {
	seen := make(map[string]time.Duration, len(cs))
	p.last = p.last[:0]
	for _, c := range cs {
		if c.clientID == self {
			continue
		}
		first, ok := p.seen[c.member]
		if !ok {
			first = now
		}
		seen[c.member] = first
		p.last = append(p.last, c)
	}
	p.seen = seen
}

// decide reports whether to hand over at now to a member of higher priority, given how long this
// instance's tenures have led (ledFor, the shortest of those that lead), and which member is
// preferred. If not, wake is when the answer may change (zero if only a new description can
// change it): when the first member of higher priority settles, or the tenures have led for the
// settle time.
func (p *preference) decide(now, ledFor time.Duration) (to contender, hand bool, wake time.Duration) {
	found := false
	for _, c := range p.last {
		if c.priority <= p.mine {
			continue
		}
		settled := p.seen[c.member] + p.settle
		if settled <= now {
			if !found || c.priority > to.priority {
				to, found = c, true
			}
			continue
		}
		if wake == 0 || settled < wake {
			wake = settled
		}
	}
	if found {
		if ledFor >= p.settle {
			return to, true, 0
		}
		return to, false, now + p.settle - ledFor
	}
	return contender{}, false, wake
}

// outranked reports whether the latest description shows a member of higher priority, settled or
// not: a member standing by stays out while there is one.
func outranked(mine int, self string, cs []contender) bool {
	for _, c := range cs {
		if c.clientID != self && c.priority > mine {
			return true
		}
	}
	return false
}
