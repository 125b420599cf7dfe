package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goneli/goneli"
)

const statusAbout = `Shows --group once, as an operator wants to see it, and exits: whether the group is stable
or rebalancing, its members (name, priority, client id, host, partitions of the leader topic), and for
each role (partition) the live leader with its fencing token, tenure start and address, and
the age of the newest record on its partition. A leader counts as live while its newest
heartbeat is younger than --heartbeat-timeout; give the lease the contenders use.

It asks the group coordinator for the group and reads the newest record of each partition
of the leader topic; it never joins the group. Exit status 0 when it could describe the
group (whether or not anyone leads), 1 when the group does not exist or Kafka could not
be asked, 2 for a bad command line.`

func parseStatus(args []string, stdout io.Writer) (readerOptions, error) {
	return parseReader("status", statusAbout, "output format: text or json",
		"this client's name, seen by the broker as client.id goneli-<name>-... (default <hostname>_<pid>_<time>)",
		"the contenders' lease: a leader whose newest heartbeat is older is not live", args, stdout)
}

func runStatus(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseStatus(args, stdout)
	if err != nil {
		return 0, err
	}
	_, config, ctx, stop, err := o.start(stderr)
	if err != nil {
		return 0, err
	}
	defer stop()
	st, err := goneli.Describe(ctx, config)
	switch {
	case errors.Is(err, goneli.ErrNoSuchGroup):
		return 0, fmt.Errorf("group %q does not exist on %s: it has no members and no committed offsets; check --group", config.LeaderGroupID, o.kafka)
	case err != nil:
		return 0, err
	}
	if o.format == "json" {
		line, err := json.MarshalIndent(statusRecordOf(st), "", "  ")
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(stdout, "%s\n", line)
		return exitOK, nil
	}
	printStatus(stdout, st)
	return exitOK, nil
}

// statusRecord is --format json: stable field names in snake case, times in RFC 3339 with
// milliseconds, durations in milliseconds.
type statusRecord struct {
	Time        string         `json:"time"`
	Group       string         `json:"group"`
	Topic       string         `json:"topic"`
	State       string         `json:"state"`
	Rebalancing bool           `json:"rebalancing"`
	Protocol    string         `json:"protocol"`
	Members     []memberRecord `json:"members"`
	Roles       []roleRecord   `json:"roles"`
}

type memberRecord struct {
	Name       string  `json:"name"`
	Priority   int     `json:"priority"`
	ClientID   string  `json:"client_id"`
	Host       string  `json:"host"`
	MemberID   string  `json:"member_id"`
	Partitions []int32 `json:"partitions"`
}

type roleRecord struct {
	Role      string        `json:"role,omitempty"`
	Partition int32         `json:"partition"`
	Leader    *leaderRecord `json:"leader"` // null when no live leader
	Owner     string        `json:"owner,omitempty"`
	Newest    *newestRecord `json:"newest"` // null when the partition has no records
}

type leaderRecord struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	Tenure  string `json:"tenure"`
	Token   int64  `json:"token"`
	Since   string `json:"since"`
}

type newestRecord struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Sent   string `json:"sent"`
	AgeMs  int64  `json:"age_ms"`
	Token  int64  `json:"token"`
	Offset int64  `json:"offset"`
}

func statusRecordOf(st goneli.GroupStatus) statusRecord {
	r := statusRecord{Time: st.At.Format(watchTime), Group: st.Group, Topic: st.Topic, State: st.State,
		Rebalancing: st.Rebalancing, Protocol: st.Protocol, Members: []memberRecord{}, Roles: []roleRecord{}}
	for _, m := range st.Members {
		r.Members = append(r.Members, memberRecord{Name: m.Name, Priority: m.Priority, ClientID: m.ClientID, Host: m.Host, MemberID: m.MemberID,
			Partitions: append([]int32{}, m.Partitions...)})
	}
	for _, role := range st.Roles {
		rr := roleRecord{Role: role.Role, Partition: role.Partition, Owner: role.Owner}
		if l := role.Leader; l.Name != "" {
			rr.Leader = &leaderRecord{Name: l.Name, Address: l.Address, Tenure: l.Tenure, Token: l.Token, Since: l.Since.Format(watchTime)}
		}
		if n := role.Newest; n.Name != "" {
			rr.Newest = &newestRecord{Name: n.Name, Kind: n.Kind, Sent: n.Sent.Format(watchTime), AgeMs: n.Age.Milliseconds(),
				Token: n.Token, Offset: n.Offset}
		}
		r.Roles = append(r.Roles, rr)
	}
	return r
}

// printStatus writes the text form: a summary line, the members, then one line per role.
func printStatus(w io.Writer, st goneli.GroupStatus) {
	state := st.State
	if st.Rebalancing {
		state += " (rebalancing: a leader may be about to change)"
	}
	fmt.Fprintf(w, "group %s on topic %s at %s: %s, %s protocol, %d members\n",
		quoteField(st.Group), st.Topic, st.At.Format(watchTime), state, st.Protocol, len(st.Members))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(st.Members) > 0 {
		fmt.Fprintln(tw, "\nMEMBER\tPRIORITY\tCLIENT ID\tHOST\tPARTITIONS")
		for _, m := range st.Members {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", orDash(m.Name), m.Priority, m.ClientID, m.Host, partitionList(m.Partitions))
		}
	}
	if len(st.Roles) == 0 {
		_ = tw.Flush()
		fmt.Fprintf(w, "\nno leader: topic %s does not exist yet (no member has started)\n", st.Topic)
		return
	}
	fmt.Fprintln(tw, "\nROLE\tPARTITION\tLEADER\tTOKEN\tSINCE\tADDRESS\tNEWEST RECORD")
	for _, r := range st.Roles {
		role := r.Role
		if role == "" {
			role = "-"
		} else {
			role = quoteField(role)
		}
		newest := "none"
		if n := r.Newest; n.Name != "" {
			newest = fmt.Sprintf("%s from %s, %s old", n.Kind, n.Name, n.Age.Round(time.Millisecond))
		}
		if l := r.Leader; l.Name != "" {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", role, r.Partition, l.Name, l.Token, l.Since.Format(watchTime), orDash(quoteField(l.Address)), newest)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\tnone\t-\t-\t-\t%s\n", role, r.Partition, newest)
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func partitionList(ps []int32) string {
	if len(ps) == 0 {
		return "-"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
