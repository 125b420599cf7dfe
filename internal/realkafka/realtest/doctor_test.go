package realtest

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/realkafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The doctor on a new Apache Kafka cluster (issue 46 C5), as the embedded broker's AsKafka now
// answers: a group that does not exist yet is no warning (DescribeGroups v6 answers it
// GROUP_ID_NOT_FOUND without the principal's operations, so the doctor asks at v5), and the check
// of the transactional id creates no __transaction_state (it asks DescribeTransactions; looking the
// id's coordinator up, as it did, makes Kafka create the topic, which this test shows too).
func TestDoctorOnANewCluster(t *testing.T) {
	c := realkafka.Start(t, realkafka.Options{Cold: true})
	ctx, cancel := context.WithTimeout(context.Background(), awaitLimit)
	defer cancel()
	group := groupName(t)
	r, err := goneli.Check(ctx, goneli.Config{
		KafkaConfig:   goneli.KafkaConfigMap{"bootstrap.servers": c.Bootstrap()},
		LeaderGroupID: group, LeaderTopic: group + ".neli", Name: "doctor",
		HeartbeatTimeout: goneli.Duration(lease),
	})
	if err != nil {
		t.Fatalf("Check: %v; report %+v", err, r)
	}
	for name, want := range map[string]string{
		"acl-group":            "may read and describe group " + group,
		"acl-transactional-id": "may describe transactional id goneli-fenced." + group,
	} {
		found := false
		for _, res := range r.Checks {
			if res.Name == name {
				found = true
				if res.Status != goneli.CheckOK || !strings.Contains(res.Detail, want) {
					t.Errorf("%s: %v %q; want ok saying %q", name, res.Status, res.Detail, want)
				}
			}
		}
		if !found {
			t.Errorf("no %s line in %+v", name, r)
		}
	}
	adm := admin(t, c)
	topics, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("__transaction_state") {
		t.Fatal("the check made Kafka create __transaction_state")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// What the doctor no longer reads: DescribeGroups v6 (kgo asks at the broker's highest) answers
	// a group that does not exist without the principal's operations.
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups, dg.IncludeAuthorizedOperations = []string{group}, true
	resp, err := cl.Request(ctx, dg)
	if err != nil {
		t.Fatal(err)
	}
	g := resp.(*kmsg.DescribeGroupsResponse).Groups[0]
	t.Logf("Kafka %s: DescribeGroups v%d of a group that does not exist: error %d, operations %d", c.Version(), resp.GetVersion(), g.ErrorCode, g.AuthorizedOperations)
	if resp.GetVersion() >= 6 &&
		(g.ErrorCode != kerr.GroupIDNotFound.Code || g.AuthorizedOperations != math.MinInt32) {
		t.Errorf("DescribeGroups v%d of a group that does not exist: error %d, operations %d; want GROUP_ID_NOT_FOUND and none",
			resp.GetVersion(), g.ErrorCode, g.AuthorizedOperations)
	}

	// What the doctor no longer does: a transaction coordinator's lookup creates the topic.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKey, fc.CoordinatorKeys = 1, "lookup", []string{"lookup"}
	if _, err := cl.Request(ctx, fc); err != nil {
		t.Fatal(err)
	}
	for {
		topics, err := adm.ListTopicsWithInternal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if topics.Has("__transaction_state") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("a transaction coordinator's lookup did not make Kafka create __transaction_state")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
