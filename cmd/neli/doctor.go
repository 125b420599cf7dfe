package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/goneli/goneli"
)

const doctorAbout = `Checks, before anything is deployed, that the cluster will work for --group: that the
bootstrap servers answer as Kafka (and let the SASL user in), the broker's version and group
protocols, the group session that the lease needs against the broker's bounds (or, under
group.protocol=consumer, the session the broker applies), the leader topic (exists with a
partition per role or may be created; replication factor, min.insync.replicas, cleanup and
retention), the ACLs a contender, an observer and 'neli status' need, and every setting
goneli would refuse. It prints one line per check, ok, warn or FAIL, with what to do.

It never joins the group or writes to the leader topic: it asks with requests that change
nothing (Metadata, DescribeConfigs, FindCoordinator, DescribeGroups or ConsumerGroupDescribe,
and a CreateTopics that only validates), so it is safe beside a running group. Give it the flags, -X/-F settings and
environment that 'neli run' gets. Exit status 0 when nothing FAILs (warnings included), 1 when
something does, 2 for a bad command line.`

type doctorOptions struct {
	common
	format string
	topicFlags
}

func parseDoctor(args []string, stdout io.Writer) (doctorOptions, error) {
	var o doctorOptions
	o.kafka = "localhost:9092"
	fs := newFlagSet("doctor", "[--kafka ADDR] [--group G] [--topic T] [--roles N | --role NAME...] [--heartbeat-timeout D] [-X k=v...] [--format text|json]", doctorAbout)
	o.register(fs, "neli", "warn", goneli.DefaultHeartbeatTimeout)
	fs.StringVar(&o.format, "format", "text", "output format: text (one line per check) or json")
	o.registerTopic(fs)
	fs.Lookup("replication-factor").Usage = "replication factor 'neli run' would create the leader topic with (default: the broker's)"
	fs.Lookup("roles").Usage = "check for N numbered roles, as 'neli run --roles N' (default: a single leader)"
	fs.Lookup("role").Usage = "check for the role NAME, as 'neli run --role NAME'; repeat for more roles"
	fs.Lookup("name").Usage = "the name 'neli run' would use; only its client.id is seen by the broker"
	fs.Lookup("heartbeat-timeout").Usage = "the lease the contenders will use; the broker must allow the group session it implies (about 1.25 x the lease)"
	if err := o.parseFlags(fs, args, stdout); err != nil {
		return o, err
	}
	if o.format != "text" && o.format != "json" {
		return o, badUsage("--format %q: use text or json", o.format)
	}
	if err := o.checkReplicas(); err != nil {
		return o, err
	}
	var err error
	o.roles, err = o.roleNamesOf(fs)
	return o, err
}

func runDoctor(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseDoctor(args, stdout)
	if err != nil {
		return 0, err
	}
	_, scr := o.logger(stderr)
	config := o.config(scr)
	config.LeaderTopicReplicationFactor = o.replicas
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	report, err := goneli.Check(ctx, config, o.roles...)
	if o.format == "json" {
		out, jerr := json.MarshalIndent(doctorRecordOf(report, err, time.Since(start)), "", "  ")
		if jerr != nil {
			return 0, jerr
		}
		fmt.Fprintf(stdout, "%s\n", out)
	} else {
		printDoctor(stdout, report)
		if err != nil {
			if _, failed := err.(*goneli.CheckFailedError); !failed {
				fmt.Fprintf(stdout, "FAIL  %s\n", err)
			}
		}
	}
	if err != nil {
		return exitFail, nil
	}
	return exitOK, nil
}

// doctorRecord is --format json: stable snake-case names.
type doctorRecord struct {
	OK        bool          `json:"ok"`
	Worst     string        `json:"worst"`
	Error     string        `json:"error,omitempty"`
	ElapsedMs int64         `json:"elapsed_ms"`
	Checks    []checkRecord `json:"checks"`
}

type checkRecord struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func doctorRecordOf(r goneli.CheckReport, err error, elapsed time.Duration) doctorRecord {
	rec := doctorRecord{OK: err == nil, Worst: r.Worst().String(), ElapsedMs: elapsed.Milliseconds(), Checks: []checkRecord{}}
	if err != nil {
		rec.Error = err.Error()
	}
	for _, c := range r.Checks {
		rec.Checks = append(rec.Checks, checkRecord{Name: c.Name, Status: c.Status.String(), Detail: c.Detail, Fix: c.Fix})
	}
	return rec
}

// printDoctor writes one line per check: status, name, what was found and, after "->", what to do.
func printDoctor(w io.Writer, r goneli.CheckReport) {
	for _, c := range r.Checks {
		line := fmt.Sprintf("%-4s  %-12s  %s", c.Status, c.Name, c.Detail)
		if c.Fix != "" {
			line += " -> " + c.Fix
		}
		fmt.Fprintln(w, line)
	}
}
