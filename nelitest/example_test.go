package nelitest_test

import (
	"context"
	"fmt"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/nelitest"
)

// Elect a leader of two contenders on the embedded broker, cut the leader off the network, and
// watch the other take over. In a test, nelitest.Start(t) and nelitest.AwaitLeader do the same
// with less ceremony: they stop the broker and fail the test by themselves.
func Example() {
	broker, err := nelitest.New()
	if err != nil {
		panic(err)
	}
	defer broker.Close() // runs last: the contenders need the broker to leave the group

	names := []string{"a", "b"}
	var contenders []nelitest.Instance
	for _, name := range names {
		n, err := goneli.New(broker.Config(name))
		if err != nil {
			panic(err)
		}
		// Background pulses n, and runs the task over and over while n leads.
		p, err := n.Background(func() {})
		if err != nil {
			panic(err)
		}
		defer func() {
			_ = n.Close()
			_ = p.Await()
			n.Await() // its Kafka clients too, which may finish closing after Close returns
		}()
		contenders = append(contenders, n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), nelitest.DefaultTimeout)
	defer cancel()
	first, err := nelitest.WaitLeader(ctx, contenders...)
	if err != nil {
		panic(err)
	}
	fmt.Println("one of the two leads")

	// Which one leads is up to the broker; the output is the same either way.
	broker.Cut(names[first])
	other := 1 - first
	if _, err := nelitest.WaitLeader(ctx, contenders[other]); err != nil {
		panic(err)
	}
	fmt.Println("the other took over")
	// The group elects a successor only after the cut member's session has expired, by which time
	// its lease has run out: it no longer leads, though nothing told it of the successor.
	fmt.Println("the cut one still leads:", contenders[first].IsLeader())
	broker.Heal(names[first])
	// Closed only once it is back in the group: closing a contender in the middle of a rebalance can
	// crash librdkafka 2.11.1 (see WaitSettled).
	if err := broker.WaitSettled(ctx, len(names)); err != nil {
		panic(err)
	}

	// Output:
	// one of the two leads
	// the other took over
	// the cut one still leads: false
}
