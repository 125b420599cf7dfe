package goneli

import (
	"errors"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

func TestDerivedClientIDCarriesPriority(t *testing.T) {
	c := validConfig()
	c.Name, c.Priority = "web 1", 3
	t0, err := c.groupTiming()
	if err != nil {
		t.Fatal(err)
	}
	consumer, producer, admin := c.clientConfigs(t0)
	for what, conf := range map[string]kafka.ConfigMap{"consumer": consumer, "producer": producer, "admin": admin} {
		if got := conf["client.id"]; got != "goneli--997-web_1" {
			t.Errorf("%s client.id = %v, want goneli--997-web_1", what, got)
		}
	}
}

// The mocks refuse TransferTo as the real thing does, and otherwise revoke.
func TestMockTransferTo(t *testing.T) {
	var events []Event
	m, err := NewMock(MockConfig{}, func(e Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.TransferTo("b"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("TransferTo while not leading: %v", err)
	}
	m.AcquireLeader()
	if err := m.TransferTo("b"); err != nil || m.IsLeader() || m.Stats().Transfers != 1 {
		t.Fatalf("TransferTo: %v, leader %v, %d transfers", err, m.IsLeader(), m.Stats().Transfers)
	}
	if len(events) != 2 {
		t.Fatalf("events %v, want LeaderAcquired and LeaderRevoked", events)
	}
	if _, ok := events[1].(LeaderRevoked); !ok {
		t.Fatalf("events %v, want LeaderAcquired and LeaderRevoked", events)
	}
	rs, err := NewMockRoles(MockConfig{}, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rs.AcquireLeader("a")
	if err := rs.TransferTo("a", "x"); !errors.Is(err, ErrRolesTransfer) {
		t.Fatalf("TransferTo of one of two roles: %v", err)
	}
	if err := rs.TransferTo("c", "x"); err == nil || !strings.Contains(err.Error(), `role "c"`) {
		t.Fatalf("TransferTo of a role the instance does not have: %v", err)
	}
}
