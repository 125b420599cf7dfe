package coretest

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	. "github.com/goneli/goneli"
)

func describeNow(t *testing.T, config Config) GroupStatus {
	t.Helper()
	st, err := Describe(context.Background(), config)
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	return st
}

// awaitStatus describes the group until cond holds. A description is a snapshot that no event
// announces, so it is asked for again at a short interval.
func awaitStatus(t *testing.T, what string, config Config, cond func(GroupStatus) bool) GroupStatus {
	t.Helper()
	limit := time.Now().Add(awaitLimit)
	for {
		st := describeNow(t, config)
		if cond(st) {
			return st
		}
		if time.Now().After(limit) {
			t.Fatalf("%s: not within %v; last status %+v", what, awaitLimit, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDescribeUnknownGroup(t *testing.T) {
	b := startKafka(t)
	_, err := Describe(context.Background(), testConfig(b, "nobody-ever-joined", "d", newTestLog(t)))
	if !errors.Is(err, ErrNoSuchGroup) {
		t.Fatalf("Describe of an unknown group: %v, want ErrNoSuchGroup", err)
	}
}

// Describe shows the members, the leader with its address and token, and who owns its partition.
func TestDescribeLeaderAndFollower(t *testing.T) {
	b := startKafka(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	config := testConfig(b, group, "a", log)
	config.Address = "http://a.example:8080"
	a := contender(t, config, r).(Curator)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	contender(t, testConfig(b, group, "c", log), r)
	awaitStable(t, b, group, 2)

	st := awaitStatus(t, "both members listed, a leading", testConfig(b, group, "d", log), func(st GroupStatus) bool {
		return len(st.Members) == 2 && len(st.Roles) == 1 && st.Roles[0].Leader.Name == "a" && st.Roles[0].Owner == "a"
	})
	if st.Group != group || st.Topic != group+".neli" || st.State != "Stable" || st.Rebalancing || st.Protocol != "classic" {
		t.Errorf("group fields: %+v", st)
	}
	names := []string{st.Members[0].Name, st.Members[1].Name}
	if !slices.Equal(names, []string{"a", "c"}) || st.Members[0].ClientID != "goneli-a" || st.Members[0].Host == "" ||
		!slices.Equal(st.Members[0].Partitions, []int32{0}) || len(st.Members[1].Partitions) != 0 {
		t.Errorf("members: %+v", st.Members)
	}
	l, n := st.Roles[0].Leader, st.Roles[0].Newest
	if l.Address != config.Address || l.Token != a.Token() || l.Since.IsZero() || l.Role != "" {
		t.Errorf("leader %+v; a's token is %d", l, a.Token())
	}
	if n.Name != "a" || n.Kind != "heartbeat" || n.Token != a.Token() || n.Age < 0 || n.Age > testLease {
		t.Errorf("newest record %+v", n)
	}
}

// A leader that was killed is reported as no live leader once its newest heartbeat is older than
// the lease, though the group still lists it until its session times out.
func TestDescribeCrashedLeader(t *testing.T) {
	b := startKafka(t)
	log, group := newTestLog(t), groupName(t)
	child, events := startChild(t, b, group, "child")
	for ev := range events {
		if ev == "LeaderAcquired" {
			break
		}
	}
	config := testConfig(b, group, "d", log)
	before := awaitStatus(t, "the child to lead", config, func(st GroupStatus) bool {
		return len(st.Roles) == 1 && st.Roles[0].Leader.Name == "child"
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	after := awaitStatus(t, "no live leader", config, func(st GroupStatus) bool {
		return len(st.Roles) == 1 && st.Roles[0].Leader.Name == ""
	})
	n := after.Roles[0].Newest
	if n.Name != "child" || n.Kind != "heartbeat" || n.Age <= testLease || n.Token != before.Roles[0].Leader.Token {
		t.Fatalf("newest record after the crash: %+v, want the child's heartbeat, older than %v, token %d", n, testLease, before.Roles[0].Leader.Token)
	}
}

// With roles, each partition is reported under its role's name, led by the member it is assigned.
func TestDescribeRoles(t *testing.T) {
	b := startKafka(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := []string{"billing", "audit", "search"}
	sets := map[string]Roles{}
	for _, name := range []string{"a", "c"} {
		sets[name] = roleContender(t, testConfig(b, group, name, log), roles, r)
	}
	led := awaitLed(t, "every role led", roles, sets, balanced(len(roles)))
	leaderOf := map[string]string{}
	for who, rs := range led {
		for _, role := range rs {
			leaderOf[role] = who
		}
	}
	st := awaitStatus(t, "every role reported with its leader", testConfig(b, group, "d", log), func(st GroupStatus) bool {
		if len(st.Roles) != len(roles) || len(st.Members) != 2 {
			return false
		}
		for _, rs := range st.Roles {
			if rs.Leader.Name == "" || rs.Leader.Name != rs.Owner {
				return false
			}
		}
		return true
	})
	for i, rs := range st.Roles {
		if rs.Role != roles[i] || rs.Partition != int32(i) || rs.Leader.Role != roles[i] || rs.Leader.Name != leaderOf[roles[i]] {
			t.Errorf("partition %d: %+v; want role %s led by %s", i, rs, roles[i], leaderOf[roles[i]])
		}
	}
}
