package core

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Judging a description of the group, for the group check (internal/driver, groupcheck.go describes it).

// groupCheck is the result of one check of the group for one tenure.
type GroupCheck struct {
	Verdict GroupVerdict
	err     error
}

// groupVerdict is what a description of the group says about this instance's tenure.
type GroupVerdict struct {
	Conflict *GroupConflictError
	// sawSelf is set when the description shows this instance holding the tenure's partition of
	// its topic, which proves that it reflects a generation no older than the tenure's
	// assignment. kfake, for one, shows no assignments while a group rebalances.
	SawSelf bool
}

// judgeGroup reads a group description for a tenure of partition, assigned under member id member
// (if known: a predecessor of the same client.id may still be in the group, and it must not pass
// for this instance).
//
// A partition the description gives no topic name for cannot be judged. Apache Kafka names every
// topic it describes, but kfake, under KIP-848, gives topic IDs only: goneli's own connection maps
// them to names from the cluster's metadata where it can (internal/sidechan), and confluent-kafka-go
// passes on no topic IDs at all, so a partition may still come without one. Such a partition counts
// as the instance's own topic only when it belongs to this instance's own member, whose consumer
// subscribes to that one topic, and that member is known for certain: by its member id, or as the
// only one with this client.id. Any other member's nameless partition makes the verdict a conflict
// (Unnamed), so that the tenure does not lead: counting it as the own topic is what let a member on
// another topic lead beside this one.
func JudgeGroup(d GroupDesc, topic, clientID, member string, partition int32) GroupVerdict {
	var v GroupVerdict
	selves := 0
	for _, m := range d.Members {
		if m.ClientID == clientID {
			selves++
		}
	}
	for _, m := range d.Members {
		self := m.ClientID == clientID && (member == "" || m.MemberID == member)
		var foreign []string
		var unnamed []int32
		for _, tp := range m.Parts {
			switch {
			case tp.Topic != "" && tp.Topic != topic:
				if !slices.Contains(foreign, tp.Topic) {
					foreign = append(foreign, tp.Topic)
				}
			case tp.Topic == "" && !(self && (member != "" || selves == 1)):
				if !slices.Contains(unnamed, tp.Partition) {
					unnamed = append(unnamed, tp.Partition)
				}
			case self && tp.Partition == partition:
				v.SawSelf = true
			}
		}
		otherRoles := rolesDigestOf(m.ClientID) != rolesDigestOf(clientID)
		if len(foreign) > 0 || len(unnamed) > 0 || otherRoles {
			if v.Conflict == nil {
				v.Conflict = &GroupConflictError{Group: d.Group, Topic: topic, Roles: rolesDigestOf(clientID)}
			}
			sort.Strings(foreign)
			slices.Sort(unnamed)
			fm := ForeignMember{ClientID: m.ClientID, Host: m.Host, Topics: foreign, Unnamed: unnamed}
			if otherRoles {
				fm.Roles = rolesDigestOf(m.ClientID)
				if fm.Roles == "" {
					fm.Roles = singleRole
				}
			}
			v.Conflict.Members = append(v.Conflict.Members, fm)
		}
	}
	return v
}

// Members of one group must agree on which role each partition stands for: two instances whose
// role lists differ would each lead "billing" on a partition of its own. Every instance made by
// NewRoles therefore ends its consumer's client.id with rolesSuffix and a digest of its role list,
// which the group's description shows for every member, and the group check treats a member with
// another digest (or none, for New's single role) like a member on another topic: whichever is
// assigned later sees the other and does not lead.
const RolesSuffix = "--roles-"

// singleRole stands for New's single unnamed role in a GroupConflictError.
const singleRole = "(single leader)"

// rolesDigest names a role list: eight hex digits of its SHA-256, order included, since the order
// says which partition each role is. Each name is hashed after its length, so that no two lists
// hash the same bytes: with a separator instead, a name containing it could shift a boundary, and
// two lists that name one role for different partitions would pass each other's group check.
func RolesDigest(roles []string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, r := range roles {
		_, _ = h.Write(n[:binary.PutUvarint(n[:], uint64(len(r)))])
		_, _ = h.Write([]byte(r))
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// rolesDigestOf reads the digest from a member's client.id; empty for a member without one.
func rolesDigestOf(clientID string) string {
	i := strings.LastIndex(clientID, RolesSuffix)
	if i < 0 {
		return ""
	}
	return clientID[i+len(RolesSuffix):]
}

// membership says whether this instance's current membership of the group has passed a group
// check and has held a partition of the leader topic in every generation since. It does no I/O.
type Membership struct {
	member  string // the member id the group gave this instance; empty while unknown
	Vouched bool
}

// assigned records a rebalance that gave this instance partitions (holds says whether it now holds
// any partition of the leader topic), under member id member ("" if it cannot be read).
func (m *Membership) Assigned(member string, holds bool) {
	if member == "" || member != m.member || !holds {
		m.Vouched = false
	}
	m.member = member
}

// revoked records a rebalance that took partitions away. A lost assignment means the group moved
// on without this member; an incremental revocation that leaves nothing means a generation
// without a partition. An eager revocation of everything is followed, in the same rebalance, by
// the next generation's assignment, which assigned judges.
func (m *Membership) Revoked(lost, cooperative, holds bool) {
	if lost || (cooperative && !holds) {
		m.Vouched = false
	}
}

// left records that this instance left the group (a yield, or Close): it rejoins as a new member.
func (m *Membership) Left() {
	m.Vouched, m.member = false, ""
}

// passed records a check that cleared a tenure which began under member id member.
func (m *Membership) Passed(member string) {
	if member != "" && member == m.member {
		m.Vouched = true
	}
}

// checkQuiet is how long after a client last saw a broker connection fail the group is not
// described (see "How often the group is described"): long enough for librdkafka to have
// reconnected or to have seen the rest of a restart, short next to a lease.
const CheckQuiet = time.Second

// checkQuietMax bounds how long a check waits for checkQuiet: connections that fail over and over
// (a broker gone for good, say) must not keep the group from ever being checked.
const checkQuietMax = 10 * time.Second

// GroupConflictError reports members of the leader group that work on another leader topic, or
// with another list of roles, or whose partitions the group coordinator's description does not name
// the topic of. No instance that sees such a member leads until it has gone: fix the configuration
// so that every contender of the group names the same LeaderTopic and the same roles in the same
// order. Apache Kafka names every topic in its descriptions; a broker that does not (kfake under
// KIP-848, for one) leaves an instance unable to tell whether another member holding a partition
// uses its topic, and it does not lead beside such a member.
type GroupConflictError struct {
	Group string
	Topic string
	// Roles is the digest of this instance's role list (see NewRoles); empty for New.
	Roles string
	// Members are the members that disagree, or that cannot be told to agree.
	Members []ForeignMember
}

// ForeignMember is a member of the leader group that holds partitions of other topics, or has
// another role list, or holds partitions whose topic the group's description does not name.
type ForeignMember struct {
	ClientID string
	Host     string
	// Topics are the other topics it holds partitions of.
	Topics []string
	// Roles is the digest of its role list when that differs from this instance's.
	Roles string
	// Unnamed are the partitions it holds whose topic the group's description does not name: they
	// may be partitions of another leader topic.
	Unnamed []int32
}

// definite reports whether the conflict rests on something seen, another topic or another role
// list, rather than only on partitions whose topic is not named.
func (e *GroupConflictError) Definite() bool {
	for _, m := range e.Members {
		if len(m.Topics) > 0 || m.Roles != "" {
			return true
		}
	}
	return false
}

func (e *GroupConflictError) Error() string {
	var sb strings.Builder
	for i, m := range e.Members {
		if i > 0 {
			sb.WriteString(", ")
		}
		var what []string
		if len(m.Topics) > 0 {
			what = append(what, "topics "+strings.Join(m.Topics, ", "))
		}
		if m.Roles != "" {
			what = append(what, "roles "+m.Roles)
		}
		if len(m.Unnamed) > 0 {
			parts := make([]string, len(m.Unnamed))
			for j, p := range m.Unnamed {
				parts[j] = strconv.Itoa(int(p))
			}
			what = append(what, "partitions "+strings.Join(parts, ", ")+" of a topic the group's description does not name")
		}
		fmt.Fprintf(&sb, "%s on %s (%s)", m.ClientID, m.Host, strings.Join(what, "; "))
	}
	mine := "the single leader"
	if e.Roles != "" {
		mine = "roles " + e.Roles
	}
	if !e.Definite() {
		return fmt.Sprintf("goneli: group %s has members holding partitions whose topic the broker's description of the group does not name, "+
			"so they may use another leader topic than %s: %s; no instance leads beside them (Apache Kafka names the topics; "+
			"with a broker that does not, such as kfake under KIP-848, a member leads only while no other member holds a partition)",
			e.Group, e.Topic, sb.String())
	}
	return fmt.Sprintf("goneli: group %s is shared with members that use another leader topic than %s, or other roles than %s: %s; "+
		"every contender of a group must use the same LeaderTopic and the same roles in the same order, and no other consumer may use the group",
		e.Group, e.Topic, mine, sb.String())
}
