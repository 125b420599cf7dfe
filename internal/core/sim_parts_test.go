package core

import (
	"fmt"
	"math/bits"
	"strings"
)

// simParts is a set of partitions of the leader topic, one bit each: a schedule's roles number
// at most simMaxRoles. A set rather than a map keeps every walk over it in partition order, which
// the simulation's determinism needs, and costs no allocation.
type simParts uint64

// simMaxRoles bounds the roles of a schedule (simWorld.roles).
const simMaxRoles = 64

func partsOf(ids ...int32) simParts {
	var s simParts
	for _, id := range ids {
		s = s.add(id)
	}
	return s
}

func (s simParts) has(p int32) bool         { return s&(1<<uint(p)) != 0 }
func (s simParts) add(p int32) simParts     { return s | 1<<uint(p) }
func (s simParts) del(p int32) simParts     { return s &^ (1 << uint(p)) }
func (s simParts) count() int               { return bits.OnesCount64(uint64(s)) }
func (s simParts) subsetOf(t simParts) bool { return s&^t == 0 }

// list returns the partitions in order.
func (s simParts) list() []int32 {
	out := make([]int32, 0, s.count())
	for s != 0 {
		p := int32(bits.TrailingZeros64(uint64(s)))
		out = append(out, p)
		s = s.del(p)
	}
	return out
}

// nth returns the set's i-th partition in order (0 <= i < count).
func (s simParts) nth(i int) int32 {
	for ; i > 0; i-- {
		s &= s - 1
	}
	return int32(bits.TrailingZeros64(uint64(s)))
}

func (s simParts) String() string {
	if s == 0 {
		return "none"
	}
	var b strings.Builder
	for i, p := range s.list() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
}

// simBalance is what both group protocols' assignors do with one topic that every member
// subscribes to (librdkafka's cooperative-sticky, src/rdkafka_sticky_assignor.c; Apache Kafka's
// server-side uniform assignor, UniformAssignor and its OptimizedUniformAssignmentBuilder): a
// partition stays with its current owner (owners[p], 0 for none) while that one is a member;
// the others go to the members with the fewest; then partitions move from the most loaded
// members to the least until their counts differ by at most one. Among members that tie, and
// among the partitions a member could give up, the schedule's random source picks, as the real
// assignors pick by member ids that sort as they will. members are member ids in the group's
// order; the result gives each partition its member.
func (w *simWorld) simBalance(partitions int, members []int, owners []int) []int {
	out := make([]int, partitions)
	if len(members) == 0 {
		return out
	}
	load := make([]int, len(members))
	index := func(id int) int {
		for i, m := range members {
			if m == id {
				return i
			}
		}
		return -1
	}
	for p := 0; p < partitions; p++ {
		if i := index(owners[p]); i >= 0 {
			out[p] = owners[p]
			load[i]++
		}
	}
	least := func() int {
		lo := load[0]
		for _, n := range load {
			lo = min(lo, n)
		}
		return w.tie(load, lo)
	}
	for p := 0; p < partitions; p++ {
		if out[p] == 0 {
			i := least()
			out[p] = members[i]
			load[i]++
		}
	}
	for {
		lo, hi := load[0], load[0]
		for _, n := range load {
			lo, hi = min(lo, n), max(hi, n)
		}
		if hi-lo <= 1 {
			return out
		}
		from, to := w.tie(load, hi), w.tie(load, lo)
		var theirs []int
		for p := range out {
			if out[p] == members[from] {
				theirs = append(theirs, p)
			}
		}
		out[theirs[w.rng.IntN(len(theirs))]] = members[to]
		load[from]--
		load[to]++
	}
}

// tie picks one of the indices whose load is n.
func (w *simWorld) tie(load []int, n int) int {
	k := 0
	for _, x := range load {
		if x == n {
			k++
		}
	}
	if k > 1 {
		k = w.rng.IntN(k)
	} else {
		k = 0
	}
	for i, x := range load {
		if x == n {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}
