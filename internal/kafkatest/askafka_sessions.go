package kafkatest

import (
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// sessions ends a KIP-848 member's session a session timeout after its last heartbeat, as Kafka
// does, where kfake ends it a session timeout after its last heartbeat or offset commit.
//
// In Kafka only ConsumerGroupHeartbeat reschedules a consumer-protocol member's session
// (GroupMetadataManager.consumerGroupHeartbeat -> scheduleConsumerGroupSessionTimeout,
// group-coordinator/src/main/java/org/apache/kafka/coordinator/group/GroupMetadataManager.java);
// OffsetMetadataManager.commitOffset reschedules the heartbeat of a classic group's member only
// (group-coordinator/.../OffsetMetadataManager.java, "In the old consumer group protocol, the
// offset commits maintain the session"). kfake's handleConsumerOffsetCommit re-arms the session
// on every accepted commit of a KIP-848 member (pkg/kfake/groups.go:3210,
// g.atConsumerSessionTimeout(m)), with no option to turn it off, no exported way to end a member's
// session, and nothing a control function can do about it: the session is re-armed inside kfake's
// handling of the commit, which a control function can only replace entirely.
//
// So the broker keeps a session of its own per member, from the heartbeats it passes, and when one
// ends while kfake still has the member, it sends kfake a leave heartbeat (epoch -1) in the
// member's name on the member's last connection, which removes the member exactly as the end of
// its session does in Kafka: the group moves on, and the member's next heartbeat gets
// UNKNOWN_MEMBER_ID. The kfake side of that connection stays open for this after the client's
// side closes. The session timeout is the group's consumer.session.timeout.ms, else the
// coordinator's group.consumer.session.timeout.ms, as kfake reads them when the member joins; a
// principal that may not describe the broker's configs leaves the member to kfake's session.
type sessions struct {
	k       *Kafka
	mu      sync.Mutex
	members map[memberKey]*session
	held    map[*kconn]int // sessions whose member last heartbeated on the connection
	closed  bool
}

type memberKey struct{ group, member string }

type session struct {
	key     memberKey
	conn    *kconn
	timeout time.Duration
	last    time.Time
	timer   *time.Timer
}

func newSessions(k *Kafka) *sessions {
	return &sessions{k: k, members: map[memberKey]*session{}, held: map[*kconn]int{}}
}

// consumerHeartbeat passes a ConsumerGroupHeartbeat to kfake and follows the member's session.
func (k *Kafka) consumerHeartbeat(x *exchange, node int32) ([]byte, bool) {
	req, ok := x.request().(*kmsg.ConsumerGroupHeartbeatRequest)
	if !k.cfg.sessions || !ok {
		raw, err := x.forwardRaw()
		return raw, err == nil
	}
	return x.patched(func(_ kmsg.Request, resp kmsg.Response) bool {
		r := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
		id := req.MemberID
		if r.MemberID != nil {
			id = *r.MemberID
		}
		key := memberKey{req.Group, id}
		if r.ErrorCode != 0 || req.MemberEpoch < 0 || r.MemberEpoch < 0 {
			k.sessions.end(key)
			return false
		}
		k.sessions.heartbeat(x, node, key)
		return false
	})
}

// heartbeat starts or renews the member's session. The caller holds the connection's turn.
func (ss *sessions) heartbeat(x *exchange, node int32, key memberKey) {
	now := time.Now()
	ss.mu.Lock()
	s, ok := ss.members[key]
	ss.mu.Unlock()
	if !ok {
		timeout := sessionTimeout(x.c, key.group, node)
		if timeout <= 0 {
			return
		}
		s = &session{key: key, timeout: timeout}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return
	}
	if cur, ok := ss.members[key]; ok {
		s = cur
	} else {
		ss.members[key] = s
		s.timer = time.AfterFunc(s.timeout, func() { ss.expire(s) })
	}
	s.last = now
	if s.conn != x.c {
		ss.move(s, x.c)
	}
}

// move makes c the connection that holds s. The caller holds mu.
func (ss *sessions) move(s *session, c *kconn) {
	if old := s.conn; old != nil {
		ss.release(old)
	}
	s.conn = c
	if c != nil {
		ss.held[c]++
	}
}

// release drops a hold on c, closing its kfake side if the client is gone and nothing holds it.
// The caller holds mu.
func (ss *sessions) release(c *kconn) {
	if ss.held[c]--; ss.held[c] > 0 {
		return
	}
	delete(ss.held, c)
	select {
	case <-c.downClosed:
		c.closeBroker()
	default:
	}
}

// holds tells whether a session still needs c's kfake side.
func (ss *sessions) holds(c *kconn) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.held[c] > 0
}

// end forgets the member's session: it left, or kfake refused its heartbeat.
func (ss *sessions) end(key memberKey) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s, ok := ss.members[key]; ok {
		s.timer.Stop()
		delete(ss.members, key)
		ss.move(s, nil)
	}
}

// expire ends s if its timeout has passed since its last heartbeat, by a leave in its name.
func (ss *sessions) expire(s *session) {
	ss.mu.Lock()
	if ss.closed || ss.members[s.key] != s {
		ss.mu.Unlock()
		return
	}
	if left := s.timeout - time.Since(s.last); left > 0 {
		s.timer.Reset(left)
		ss.mu.Unlock()
		return
	}
	delete(ss.members, s.key)
	c := s.conn
	ss.mu.Unlock()

	leave := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	leave.Group, leave.MemberID, leave.MemberEpoch = s.key.group, s.key.member, -1
	c.turn.Lock()
	_, _ = c.ask(leave) // a member kfake no longer has is already gone
	c.turn.Unlock()

	ss.mu.Lock()
	ss.release(c)
	ss.mu.Unlock()
}

// close stops every session's timer.
func (ss *sessions) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for _, s := range ss.members {
		s.timer.Stop()
	}
}

// sessionTimeout reads the session timeout that kfake applies to group, asking on c: the group's
// consumer.session.timeout.ms if set, else node's group.consumer.session.timeout.ms; 0 if neither
// can be read. The caller holds c's turn.
func sessionTimeout(c *kconn, group string, node int32) time.Duration {
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.Version = 1
	g := kmsg.NewDescribeConfigsRequestResource()
	g.ResourceType, g.ResourceName, g.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, group, []string{"consumer.session.timeout.ms"}
	b := kmsg.NewDescribeConfigsRequestResource()
	b.ResourceType, b.ResourceName, b.ConfigNames = kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(node)), []string{"group.consumer.session.timeout.ms"}
	req.Resources = append(req.Resources, g, b)
	resp, err := c.ask(req)
	if err != nil {
		return 0
	}
	var fromGroup, fromBroker time.Duration
	for _, rr := range resp.(*kmsg.DescribeConfigsResponse).Resources {
		for _, cfg := range rr.Configs {
			if rr.ErrorCode != 0 || cfg.Value == nil {
				continue
			}
			ms, err := strconv.Atoi(*cfg.Value)
			if err != nil || ms <= 0 {
				continue
			}
			if rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig {
				fromGroup = time.Duration(ms) * time.Millisecond
			} else {
				fromBroker = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if fromGroup > 0 {
		return fromGroup
	}
	return fromBroker
}
