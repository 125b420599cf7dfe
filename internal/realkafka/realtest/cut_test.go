package realtest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Three members, each reaching the broker only through a proxy of its own, elect a leader, whose
// network is then cut: nothing passes either way, and no connection is closed. Another member
// takes over within the documented bound for a cut (about a session timeout), at no instant do two
// act as leader, and once the cut heals the old leader rejoins as a follower.
func TestNetworkCut(t *testing.T) {
	const members = 3
	proxies := make([]*realkafka.Proxy, members)
	listeners := make([]realkafka.Listener, members)
	for i := range proxies {
		p, err := realkafka.NewProxy()
		if err != nil {
			t.Fatal(err)
		}
		// Registered before the cluster's: closed after it, and after every member has stopped.
		t.Cleanup(func() { _ = p.Close() })
		proxies[i] = p
		// A broker tells a client the addresses it advertises for the listener the client came in
		// on: each member's own listener advertises its proxy, so that all of the member's
		// connections go through it, not just the first.
		listeners[i] = realkafka.Listener{Name: fmt.Sprintf("MEMBER%d", i), Advertise: []string{p.Addr()}}
	}
	c := realkafka.Start(t, realkafka.Options{Listeners: listeners})
	t.Logf("Kafka %s: %s", c.Version(), c.Timing())
	for i, p := range proxies {
		p.SetTarget(c.Listener(t, listeners[i].Name))
		assertAdvertises(t, p.Addr())
	}
	eachProtocolOn(t, c, func(t *testing.T, c *realkafka.Cluster, p protocol) {
		for _, px := range proxies {
			px.Heal() // should the previous protocol's run have failed during its cut
		}
		r, tm := elect(t, c, p, members, viaProxies(proxies))

		slot := r.leader()
		f := r.inject("cut", slot)
		healed := time.Now()
		proxies[slot].Heal()
		t.Logf("the cut of %s lasted %v", f.Victim, healed.Sub(f.At).Round(time.Millisecond))
		// Healed, the old leader finds its session gone and joins again: as a follower, which the
		// checker confirms (no two leaders), and the group settles with all three.
		r.settle("after the cut leader's network healed")
		r.check(bounds(tm))
	})
}

// assertAdvertises checks that a client bootstrapping at addr is told that the broker is at addr,
// so that it never goes around the proxy there.
func assertAdvertises(t *testing.T, addr string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range md.Brokers {
		if got := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); got != addr {
			t.Fatalf("through the proxy at %s, broker %d is advertised at %s: clients would go around the proxy", addr, b.NodeID, got)
		}
	}
}
