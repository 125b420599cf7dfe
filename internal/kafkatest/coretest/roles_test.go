package coretest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goneli/goneli"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// roleOfEvent returns the role an event is for.
func roleOfEvent(e Event) string {
	switch e := e.(type) {
	case LeaderAcquired:
		return e.Role
	case LeaderFenced:
		return e.Role
	case LeaderRevoked:
		return e.Role
	}
	return ""
}

// byRole splits events by role, keeping who each is from.
func byRole(events []stamped) map[string][]stamped {
	out := map[string][]stamped{}
	for _, e := range events {
		out[roleOfEvent(e.what)] = append(out[roleOfEvent(e.what)], e)
	}
	return out
}

// checkRoles asserts mutual exclusion and the event order for every role on its own.
func checkRoles(t *testing.T, events []stamped) {
	t.Helper()
	for _, es := range byRole(events) {
		checkExclusive(t, es)
		checkGrammar(t, es)
	}
}

// roleContender starts an instance contending for roles, pulsing in the background until the test
// ends. Its events are recorded as who.
func roleContender(t *testing.T, config Config, roles []string, r *recorder) Roles {
	t.Helper()
	return roleContenderWith(t, config, roles, r.barrier(config.Name))
}

// roleContenderWith is roleContender with a barrier of the test's own.
func roleContenderWith(t *testing.T, config Config, roles []string, barrier Barrier) Roles {
	t.Helper()
	rs, err := NewRoles(config, roles, barrier)
	if err != nil {
		t.Fatalf("NewRoles(%s): %v", config.Name, err)
	}
	p, err := rs.Background(func(string) { time.Sleep(time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if err := p.Await(); err != nil {
			t.Errorf("pulser: %v", err)
		}
		_ = rs.Close()
		awaitClientsClosed(t, rs)
	})
	return rs
}

// leaders returns, per instance, the roles it leads now.
func roleLeaders(sets map[string]Roles) map[string][]string {
	out := map[string][]string{}
	for who, rs := range sets {
		out[who] = rs.Leading()
	}
	return out
}

// awaitLed waits until every role is led by exactly one of sets and cond holds for the leaders.
func awaitLed(t *testing.T, what string, roles []string, sets map[string]Roles, cond func(map[string][]string) bool) map[string][]string {
	t.Helper()
	var got map[string][]string
	awaitCondition(t, what, func() bool {
		got = roleLeaders(sets)
		var all []string
		for _, rs := range got {
			all = append(all, rs...)
		}
		slices.Sort(all)
		want := slices.Clone(roles)
		slices.Sort(want)
		return slices.Equal(all, want) && cond(got)
	})
	return got
}

// balanced holds when every instance leads floor(N/M) or ceil(N/M) roles.
func balanced(n int) func(map[string][]string) bool {
	return func(got map[string][]string) bool {
		lo, hi := n/len(got), (n+len(got)-1)/len(got)
		for _, rs := range got {
			if len(rs) < lo || len(rs) > hi {
				return false
			}
		}
		return true
	}
}

func TestRolesSpreadOverTheGroup(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := Shards(6)
	sets := map[string]Roles{}
	for _, name := range []string{"a", "b", "c"} {
		sets[name] = roleContender(t, testConfig(b, group, name, log), roles, r)
	}
	got := awaitLed(t, "six roles spread over three members", roles, sets, balanced(6))
	t.Logf("leaders: %v", got)
	if parts := len(b.PartitionInfos(group + ".neli")); parts != 6 {
		t.Fatalf("leader topic has %d partitions, want 6", parts)
	}
	for who, rs := range sets {
		for _, role := range rs.All() {
			led := slices.Contains(got[who], role.Name())
			if s := role.Stats(); s.Role != role.Name() || (led && (s.Token == 0 || role.Token() != s.Token)) {
				t.Errorf("%s/%s: stats %+v, token %d", who, role.Name(), s, role.Token())
			}
		}
	}
	events := r.snapshot()
	for _, e := range events {
		if a, ok := e.what.(LeaderAcquired); ok && !slices.Contains(roles, a.Role) {
			t.Errorf("LeaderAcquired for an unknown role: %v", a)
		}
	}
	checkRoles(t, events)
}

// A member joining moves at most ceil(N/M) roles, each with a handoff of its own, and tokens keep
// growing per role.
func TestRolesJoinMovesFewRoles(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := Shards(6)
	// A 3 s lease: at the usual 1 s, a loaded machine can leave a leader's commits unanswered
	// through the join's rebalance for a lease (docs/safety.md, the join's fence), and its hand-over
	// then moves its roles too (5 moved in one .ci/stress run), which is not the assignor's doing.
	config := func(name string) Config {
		c := testConfig(b, group, name, log)
		c.HeartbeatTimeout = Duration(3 * time.Second)
		return c
	}
	sets := map[string]Roles{
		"a": roleContender(t, config("a"), roles, r),
		"b": roleContender(t, config("b"), roles, r),
	}
	before := awaitLed(t, "six roles over two members", roles, sets, balanced(6))
	tokens := map[string]int64{}
	for _, rs := range sets {
		for _, role := range rs.All() {
			if role.IsLeader() {
				tokens[role.Name()] = role.Token()
			}
		}
	}
	sets["c"] = roleContender(t, config("c"), roles, r)
	after := awaitLed(t, "six roles over three members", roles, sets, balanced(6))
	moved := 0
	for _, who := range []string{"a", "b"} {
		for _, role := range before[who] {
			if !slices.Contains(after[who], role) {
				moved++
			}
		}
	}
	if moved > 2 {
		t.Errorf("the join moved %d roles, want at most ceil(6/3) = 2: before %v, after %v", moved, before, after)
	}
	for _, role := range after["c"] {
		if tok := sets["c"].Role(role).Token(); tok <= tokens[role] {
			t.Errorf("role %s: token %d after the handoff, was %d", role, tok, tokens[role])
		}
	}
	checkRoles(t, r.snapshot())
}

// A barrier that takes longer than a lease to finish one role's LeaderRevoked holds up neither the
// other roles' leases nor the group; the successor of the revoked role still waits for it.
func TestRolesSlowRevokeHoldsUpNoOtherRole(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := []string{"x", "y"}
	// Every rebalance stops renewals until it completes (see the package doc's Liveness), and a
	// cooperative one takes about a second here: a 3 s lease outlasts it, so that only the barrier
	// could fence the role that stays.
	const lease = 3 * time.Second
	config := func(name string) Config {
		c := testConfig(b, group, name, log)
		c.HeartbeatTimeout = Duration(lease)
		return c
	}
	var mu sync.Mutex
	var returned time.Time // when a's barrier returned from its LeaderRevoked
	slow := 3 * lease / 2  // longer than a lease, shorter than the rebalance timeout (2 leases)
	a := roleContenderWith(t, config("a"), roles, func(e Event) {
		r.add("a", e)
		if _, ok := e.(LeaderRevoked); ok {
			time.Sleep(slow) // the work this test is about: finishing in-flight work
			mu.Lock()
			returned = time.Now()
			mu.Unlock()
		}
	})
	awaitLed(t, "a to lead both roles", roles, map[string]Roles{"a": a}, func(map[string][]string) bool { return true })

	c := roleContender(t, config("c"), roles, r)
	got := awaitLed(t, "c to lead one role", roles, map[string]Roles{"a": a, "c": c}, balanced(2))
	moved, kept := got["c"][0], got["a"][0]
	events := r.snapshot()
	if i, e := first[LeaderFenced](events, "a", 0); i >= 0 {
		t.Errorf("a was fenced while its barrier finished another role: %v", e.what)
	}
	for _, e := range events {
		if f, ok := e.what.(LeaderRevoked); ok && f.Role == kept {
			t.Errorf("a lost %s, which the group left with it: %s", kept, describe(events))
		}
	}
	i, acq := first[LeaderAcquired](events, "c", 0)
	mu.Lock()
	done := returned
	mu.Unlock()
	if i < 0 || done.IsZero() || acq.at.Before(done) {
		t.Errorf("c acquired %s at %v, before a's barrier returned from its LeaderRevoked at %v: %s",
			moved, acq.at, done, describe(events))
	}
	checkRoles(t, events)
}

func TestRolesGrowTheTopic(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	newNeli(t, testConfig(b, group, "single", log), r).Close()
	if got := len(b.PartitionInfos(group + ".neli")); got != 1 {
		t.Fatalf("New made %d partitions, want 1", got)
	}
	// Growing the topic is refused first: NewRoles names the topic and the partitions.
	refuse := b.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreatePartitions}, Err: kerr.TopicAuthorizationFailed, Count: -1})
	_, err := NewRoles(testConfig(b, group, "a", log), Shards(3))
	var pe *PartitionsError
	if !errors.As(err, &pe) || pe.Topic != group+".neli" || pe.Has != 1 || pe.Needs != 3 || !strings.Contains(err.Error(), "--partitions 3") {
		t.Fatalf("want a *PartitionsError for 1 of 3 partitions, got %v", err)
	}
	// Kafka authorises CreatePartitions by Alter on the topic (ControllerApis.handleCreatePartitions).
	var ae *AuthorizationError
	if !errors.As(err, &ae) || ae.Operation != "Alter" || ae.Resource != "topic" || ae.Name != group+".neli" ||
		!strings.Contains(err.Error(), "--operation Alter --topic "+group+".neli") {
		t.Fatalf("want an *AuthorizationError for Alter on topic %s.neli, with its command, got %v", group, err)
	}
	refuse.Remove()
	roleContender(t, testConfig(b, group, "a", log), Shards(3), r)
	if got := len(b.PartitionInfos(group + ".neli")); got != 3 {
		t.Fatalf("the topic has %d partitions after NewRoles, want 3", got)
	}
}

// Instances with different role lists would each lead a role on a partition of its own: whichever
// comes second is refused.
func TestRolesRefuseAnotherRoleList(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	a := roleContender(t, testConfig(b, group, "a", log), []string{"billing", "mailer"}, r)
	awaitLed(t, "a to lead both roles", []string{"billing", "mailer"}, map[string]Roles{"a": a}, func(map[string][]string) bool { return true })
	awaitStable(t, b, group, 1)
	for _, tc := range []struct {
		name  string
		start func() error
	}{
		{"reordered", func() error {
			_, err := NewRoles(testConfig(b, group, "b", log), []string{"mailer", "billing"})
			return err
		}},
		{"single leader", func() error {
			_, err := New(testConfig(b, group, "b", log))
			return err
		}},
	} {
		err := tc.start()
		var gc *GroupConflictError
		if !errors.As(err, &gc) || len(gc.Members) != 1 || gc.Members[0].Roles == "" || !strings.Contains(err.Error(), "same roles in the same order") {
			t.Errorf("%s: want a *GroupConflictError naming a's roles, got %v", tc.name, err)
		}
	}
}

func TestRolesValidation(t *testing.T) {
	b := startBroker(t)
	log, group := newTestLog(t), groupName(t)
	for _, tc := range []struct {
		roles []string
		want  string
	}{
		{nil, "need at least one role"},
		{[]string{"a", ""}, "roles[1]"},
		{[]string{"a", "b", "a"}, "roles[2] (a): listed twice"},
		{[]string{strings.Repeat("r", 256)}, "at most 255 bytes"},
	} {
		_, err := NewRoles(testConfig(b, group, "a", log), tc.roles)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("roles %q: want a ConfigError mentioning %q, got %v", tc.roles, tc.want, err)
		}
	}
	if got := fmt.Sprint(Shards(3)); got != "[0 1 2]" {
		t.Errorf("Shards(3) = %s", got)
	}
}

// Watch and an observing instance report the leader of every role, and a role whose leader closed
// is reported without a leader.
func TestRolesObserved(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := []string{"billing", "mailer"}
	// The topic must have its partitions before Watch starts, since Watch follows those it finds.
	a := roleContender(t, testConfig(b, group, "a", log), roles, r)
	w := watch(t, b, group, log)
	awaitLed(t, "a to lead both roles", roles, map[string]Roles{"a": a}, func(map[string][]string) bool { return true })
	for _, role := range roles {
		info := w.await(t, "a leading "+role, func(l LeaderInfo) bool { return l.Name == "a" && l.Role == role })
		if want := a.Role(role); info.Partition != want.Partition() || info.Token != want.Token() {
			t.Errorf("watched %v, want partition %d token %d", info, want.Partition(), want.Token())
		}
	}
	config := testConfig(b, group, "o", log)
	config.ObserveLeader = true
	o := roleContender(t, config, roles, r)
	awaitCondition(t, "o to observe a's roles", func() bool {
		for _, role := range roles {
			if info, ok := o.Role(role).Leader(); !ok || info.Role != role || (info.Name != "a" && info.Name != "o") {
				return false
			}
		}
		return true
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	gone := w.await(t, "a's roles released", func(l LeaderInfo) bool { return l.Name == "" })
	if !slices.Contains(roles, gone.Role) {
		t.Errorf("a release names role %q", gone.Role)
	}
}

// slowRevoker is a barrier that takes a while over every LeaderRevoked and records, per role, when
// it returned.
type slowRevoker struct {
	r        *recorder
	who      string
	slow     time.Duration
	mu       sync.Mutex
	returned map[string]time.Time
}

func (s *slowRevoker) barrier(e Event) {
	s.r.add(s.who, e)
	if _, ok := e.(LeaderRevoked); ok {
		time.Sleep(s.slow) // the in-flight work this test is about
		s.mu.Lock()
		s.returned[roleOfEvent(e)] = time.Now()
		s.mu.Unlock()
	}
}

// checkWaitedFor asserts that every LeaderAcquired of successor came after s's barrier returned
// from the same role's LeaderRevoked.
func (s *slowRevoker) checkWaitedFor(t *testing.T, successor string, events []stamped) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		if a, ok := e.what.(LeaderAcquired); ok && e.who == successor {
			if done, ok := s.returned[a.Role]; !ok || e.at.Before(done) {
				t.Errorf("%s acquired role %q at %s, before %s's barrier returned from its LeaderRevoked (%v): %s",
					successor, a.Role, e.at.Format("15:04:05.000"), s.who, done.Format("15:04:05.000"), describe(events))
			}
		}
	}
}

// A Close made while the barrier is busy with one role's LeaderRevoked (from another goroutine, or
// from the barrier itself) does not wait for it, but the successors of every role still do.
func TestRolesCloseDuringASlowRevokeHoldsSuccessorsBack(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	roles := []string{"x", "y"}
	const lease = 3 * time.Second // rebalance timeout 6 s
	config := func(name string) Config {
		c := testConfig(b, group, name, log)
		c.HeartbeatTimeout = Duration(lease)
		return c
	}
	s := &slowRevoker{r: r, who: "a", slow: 3 * lease / 2, returned: map[string]time.Time{}}
	a := roleContenderWith(t, config("a"), roles, s.barrier)
	awaitLed(t, "a to lead both roles", roles, map[string]Roles{"a": a}, func(map[string][]string) bool { return true })
	c := roleContender(t, config("c"), roles, r)
	// c's join moves one role; a's barrier is busy with that role's LeaderRevoked when a closes.
	r.await(t, "a to give a role up", has[LeaderRevoked]("a"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	awaitLed(t, "c to lead both roles", roles, map[string]Roles{"c": c}, func(map[string][]string) bool { return true })
	a.Await()
	events := r.snapshot()
	s.checkWaitedFor(t, "c", events)
	checkRoles(t, events)
}

// A successor that waits for its predecessor's barrier, and goes away before it is over, leaves
// the release marker within reach of the next one.
func TestReleaseMarkerOutlivesAWaitingSuccessor(t *testing.T) {
	b := startBroker(t)
	log, r, group := newTestLog(t), newRecorder(), groupName(t)
	const lease = 3 * time.Second // heartbeats every 100 ms; rebalance timeout 6 s
	config := func(name string) Config {
		c := testConfig(b, group, name, log)
		c.HeartbeatTimeout = Duration(lease)
		return c
	}
	s := &slowRevoker{r: r, who: "a", slow: 5 * time.Second, returned: map[string]time.Time{}}
	a, err := NewCurator(config("a"), s.barrier)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.Close()
		awaitClientsClosed(t, a)
	})
	pulse(t, a)
	r.await(t, "a to lead", has[LeaderAcquired]("a"))
	followers := map[string]Curator{
		"b": contender(t, config("b"), r).(Curator),
		"c": contender(t, config("c"), r).(Curator),
	}
	awaitStable(t, b, group, 3)
	if err := a.Yield(time.Hour); err != nil {
		t.Fatal(err)
	}
	var waiting string
	awaitCondition(t, "a follower to wait for a's barrier", func() bool {
		for name, f := range followers {
			if f.Stats().Releasing {
				waiting = name
				return true
			}
		}
		return false
	})
	// Long enough for a waiting tenure that kept heartbeating to push the marker out of reach of
	// the next one.
	time.Sleep(2500 * time.Millisecond)
	if err := followers[waiting].Close(); err != nil {
		t.Fatal(err)
	}
	next := "b"
	if waiting == "b" {
		next = "c"
	}
	events := r.await(t, next+" to lead", has[LeaderAcquired](next))
	if i, _ := first[LeaderAcquired](events, waiting, 0); i >= 0 {
		t.Errorf("%s led while a's barrier had LeaderRevoked", waiting)
	}
	s.checkWaitedFor(t, next, events)
	checkGrammar(t, events)
}
