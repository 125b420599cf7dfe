package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
