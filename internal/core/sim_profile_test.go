package core

import (
	"fmt"
	"time"
)

// simProfile is a setting the search runs under: the lease and the group timing exactly as New
// derives them (Config.prepare, groupTiming, and what New reads from the broker: fitSession for a
// classic group.min.session.timeout.ms, checkConsumerGroupSession under KIP-848).
type simProfile struct {
	name    string
	classic bool
	timing  GroupTiming

	ht, renew, minPoll, pollDuration time.Duration
	// session and hbInterval are what the coordinator applies: the client's under the classic
	// protocol, the broker's under KIP-848. maxPoll is max.poll.interval.ms, the rebalance timeout.
	session, hbInterval, maxPoll time.Duration
	commitInterval               time.Duration
	handOverAfter                time.Duration
	window                       time.Duration // the lease's commit window, for reports

	// rateBound is the largest difference between two clocks' rates, in parts per million: the
	// package doc's assumption, the margin a derived session keeps (sessionMargin) as a share of
	// that session, about 4%.
	rateBound int64
	// liveness bounds the time from the leader's crash to a healthy member leading: the package
	// doc's "about one session timeout", plus what it names besides (a group heartbeat interval to
	// learn of the rebalance, librdkafka's wait of up to a second to rejoin, a lease to prove).
	liveness time.Duration
	// window and tail shape a schedule: faults are drawn over window after the first leader, and
	// the schedule runs tail beyond the last.
	faultWindow, tail time.Duration
	// settings are what the machine needs of the profile's Config, its defaults applied.
	settings Settings
	// group and topic name the group and its leader topic.
	group, topic string
}

// kip848 is a configuration's group.protocol=consumer.
var kip848 = TimingOverrides{ConsumerProtocol: true}

// simProfiles are the settings of issue 38: the default lease, and the short leases with which the
// hole was measured, under both group protocols where they apply.
func simProfiles() []simProfile {
	return []simProfile{
		newSimProfile("default", 5*time.Second, TimingOverrides{}, 0, 0, 0),
		newSimProfile("ht500ms", 500*time.Millisecond, TimingOverrides{}, 0, 0, 0),
		newSimProfile("ht1s-session2s", time.Second, TimingOverrides{Session: 2 * time.Second}, 0, 0, 0),
		newSimProfile("ht1s-brokermin6s", time.Second, TimingOverrides{}, 6*time.Second, 0, 0),
		// The default lease with a short group heartbeat and a fast loop (heartbeat.interval.ms
		// 250, RenewInterval 100 ms, MinPollInterval 50 ms, all accepted by Validate): issue 46
		// measured 1.2 s of two leaders there with the assignment judged before the rebalance
		// callback's wait for the ends, whose window leaves that wait the most room.
		withLoop(newSimProfile("ht5s-hb250", 5*time.Second, TimingOverrides{Interval: 250 * time.Millisecond}, 0, 0, 0),
			100*time.Millisecond, 50*time.Millisecond),
		// KIP-848: the broker's session and heartbeat interval. At the default lease, Apache
		// Kafka's defaults (group.consumer.session.timeout.ms 45 s, heartbeat 5 s); for the short
		// leases, a broker set as the classic sessions above are.
		newSimProfile("default-848", 5*time.Second, kip848, 0, 45*time.Second, 5*time.Second),
		newSimProfile("ht500ms-848", 500*time.Millisecond, kip848, 0, time.Second, 100*time.Millisecond),
		newSimProfile("ht1s-session2s-848", time.Second, kip848, 0, 2*time.Second, 100*time.Millisecond),
		newSimProfile("ht1s-session6s-848", time.Second, kip848, 0, 6*time.Second, 100*time.Millisecond),
		// The least session New accepts under KIP-848 (session848.go, judge): HeartbeatTimeout plus
		// two group heartbeat intervals plus the margin for clock rates (issue 38; without the
		// margin, 1200 ms, the search found two leaders).
		newSimProfile("ht1s-minsession-848", time.Second, kip848, 0, 1250*time.Millisecond, 100*time.Millisecond),
	}
}

func simProfileNamed(name string) (simProfile, bool) {
	for _, p := range simProfiles() {
		if p.name == name {
			return p, true
		}
	}
	return simProfile{}, false
}

// newSimProfile derives a profile as New would, with the derivations New uses (the defaults of
// SetDefaults, deriveTiming): o is what the configuration sets of the timing, brokerMin the brokers'
// group.min.session.timeout.ms (classic; 0 for Kafka's default, which New does not need to read at
// sessions of 6 s and more), and session848 and interval848 the broker's KIP-848 timing.
func newSimProfile(name string, ht time.Duration, o TimingOverrides, brokerMin, session848, interval848 time.Duration) simProfile {
	minPoll := DefaultMinPollInterval(ht)
	s := Settings{Name: "sim", Topic: "sim.neli", Lease: ht, Renew: DefaultRenewInterval(ht, minPoll), MinPoll: minPoll,
		HandOverAfter: HandOverBound(ht)}
	t, err := DeriveTiming(ht, minPoll, o)
	if err != nil {
		panic(fmt.Sprintf("simulation profile %s: %v", name, err))
	}
	if t.Classic && !t.UserSession && brokerMin > t.Session {
		// fitSession
		t.Session = brokerMin
		t.MaxPoll = max(t.MaxPoll, brokerMin)
	}
	if !t.Classic {
		// checkConsumerGroupSession
		t.BrokerSession, t.BrokerInterval = session848, interval848
	}
	p := simProfile{name: name, classic: t.Classic, timing: t, ht: ht, renew: s.Renew, minPoll: s.MinPoll,
		pollDuration: DefaultPollDuration, session: t.Session, hbInterval: t.Interval, maxPoll: t.MaxPoll, commitInterval: t.Commit,
		handOverAfter: s.HandOverAfter, window: t.CommitWindow(s), settings: s, group: "sim", topic: s.Topic}
	if !t.Classic {
		p.session, p.hbInterval = session848, interval848
	}
	p.rateBound = int64(SessionMargin(ht)) * 1_000_000 / int64(SessionTimeout(ht))
	join := time.Duration(0)
	if p.classic {
		join = time.Second
	}
	p.liveness = p.session + 2*p.hbInterval + join + ht
	p.faultWindow = max(2*time.Second, 2*min(p.session, p.maxPoll))
	p.tail = p.session + p.maxPoll + 2*ht + time.Second
	return p
}

// withLoop is p with RenewInterval renew and MinPollInterval minPoll, and what New derives from them.
func withLoop(p simProfile, renew, minPoll time.Duration) simProfile {
	s := p.settings
	s.Renew, s.MinPoll = renew, minPoll
	t := p.timing
	t.Commit = AutoCommitInterval(minPoll)
	p.settings, p.timing = s, t
	p.renew, p.minPoll, p.commitInterval, p.window = renew, minPoll, t.Commit, t.CommitWindow(s)
	return p
}

func (p simProfile) String() string {
	proto := "classic"
	if !p.classic {
		proto = "KIP-848"
	}
	return fmt.Sprintf("%s (%s): HeartbeatTimeout %v, session %v, group heartbeat %v, rebalance timeout %v, RenewInterval %v, "+
		"MinPollInterval %v, auto-commit %v, commit window %v, clock rates within %d ppm",
		p.name, proto, p.ht, p.session, p.hbInterval, p.maxPoll, p.renew, p.minPoll, p.commitInterval, p.window, p.rateBound)
}
