package kafkatest

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ping(cl *kgo.Client, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return cl.Ping(ctx)
}

func TestNetemCutsOnlyTheNamedClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Fault
	}{{"refuse", Refuse}, {"blackhole", Blackhole}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Start()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			victim, _ := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ClientID("victim"))
			defer victim.Close()
			bystander, _ := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ClientID("bystander"))
			defer bystander.Close()
			if err := ping(victim, 10*time.Second); err != nil {
				t.Fatalf("before the cut: %v", err)
			}

			b.Net.Cut("victim", tc.kind)
			if err := ping(victim, 500*time.Millisecond); err == nil {
				t.Fatal("the victim still reaches the broker")
			}
			if err := ping(bystander, 10*time.Second); err != nil {
				t.Fatalf("the bystander was cut too: %v", err)
			}

			b.Net.Heal("victim")
			if err := ping(victim, 10*time.Second); err != nil {
				t.Fatalf("after healing: %v", err)
			}
		})
	}
}

func TestNetemSlowDelaysButDelivers(t *testing.T) {
	b, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ClientID("slow"))
	defer cl.Close()
	b.Net.Slow("slow", 20*time.Millisecond)
	if err := ping(cl, 10*time.Second); err != nil {
		t.Fatalf("a slow client must still get through: %v", err)
	}
}

// brokerPing asks node id of the cluster for its API versions, directly, within d.
func brokerPing(cl *kgo.Client, id int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := cl.Broker(id).Request(ctx, kmsg.NewPtrApiVersionsRequest())
	return err
}

func TestNetemCutsOnlyTheNamedBroker(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Fault
	}{{"refuse", Refuse}, {"blackhole", Blackhole}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Start(kfake.NumBrokers(3))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if len(b.Addrs) != 3 {
				t.Fatalf("Addrs = %v, want 3", b.Addrs)
			}
			cl, _ := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.ClientID("client"))
			defer cl.Close()
			// The client learns every node from metadata, so that it can address each one.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
				t.Fatalf("metadata: %v", err)
			}
			for id := range 3 {
				if err := brokerPing(cl, id, 10*time.Second); err != nil {
					t.Fatalf("before the cut, node %d: %v", id, err)
				}
			}

			b.Net.CutBroker(b.Addrs[1], tc.kind)
			if err := brokerPing(cl, 1, 500*time.Millisecond); err == nil {
				t.Fatal("the client still reaches the cut node")
			}
			for _, id := range []int{0, 2} {
				if err := brokerPing(cl, id, 10*time.Second); err != nil {
					t.Fatalf("node %d was cut too: %v", id, err)
				}
			}

			b.Net.HealBroker(b.Addrs[1])
			// Healing closes black-holed connections, and a request addressed to one broker is not
			// retried: the first may fail on the closed connection, the next goes over a new one.
			for range 3 {
				if err = brokerPing(cl, 1, 10*time.Second); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("after healing: %v", err)
			}
		})
	}
}

// A client key lets one Cut reach every client of one instance, and a Netem handed to StartNet
// keeps its faults for the broker that replaces a stopped one.
func TestNetemClientKeyAndRestart(t *testing.T) {
	nm := NewNetem()
	nm.SetClientKey(func(id string) string {
		if id == "a-observer" {
			return "a"
		}
		return id
	})
	b, err := StartNet(nm)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	client := func(id string) *kgo.Client {
		cl, _ := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ClientID(id))
		t.Cleanup(cl.Close)
		return cl
	}
	a, observer, bystander := client("a"), client("a-observer"), client("b")

	nm.Cut("a", Refuse)
	for id, cl := range map[string]*kgo.Client{"a": a, "a-observer": observer} {
		if err := ping(cl, 500*time.Millisecond); err == nil {
			t.Errorf("%s still reaches the broker", id)
		}
	}
	if err := ping(bystander, 10*time.Second); err != nil {
		t.Fatalf("the bystander was cut too: %v", err)
	}

	// Same port, same Netem: the cut holds on the new broker.
	_, port, _ := net.SplitHostPort(b.Addr)
	p, _ := strconv.Atoi(port)
	b.Close()
	if b, err = StartNetOnPort(nm, p, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := ping(observer, 500*time.Millisecond); err == nil {
		t.Error("a-observer reaches the restarted broker through the cut")
	}
	if err := ping(bystander, 10*time.Second); err != nil {
		t.Fatalf("the bystander cannot reach the restarted broker: %v", err)
	}
	nm.Heal("a")
	if err := ping(observer, 10*time.Second); err != nil {
		t.Fatalf("after healing: %v", err)
	}
}
