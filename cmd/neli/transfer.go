package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/goneli/goneli"
)

const transferAbout = `Moves the leadership of --group to the instance named --to, gracefully, without joining
the group: it checks that --to is a member of the group and that no member outranks it
('neli run --priority'), writes a transfer request to the leader topic, and waits until --to
leads. The leader acts on the request as on SIGUSR1, except that it steers the partition to
--to: its command gets SIGTERM, the successor waits until it is gone, and instances that the
group would give leadership to first pass it on without leading. Each of them costs about a
second. The leader refuses a request made within 2 x --heartbeat-timeout of its election, and
says why in its log.

Give --heartbeat-timeout the lease the contenders use. Exit status 0 once --to leads (or if
it led already), 1 when the transfer is refused or --to does not lead within --timeout, 2
for a bad command line. A group of several roles cannot be transferred one role at a time:
the group spreads roles over its members and would move the role back; use --priority.`

type transferOptions struct {
	common
	to, role string
	timeout  time.Duration
}

func parseTransfer(args []string, stdout io.Writer) (transferOptions, error) {
	var o transferOptions
	o.kafka = "localhost:9092"
	fs := newFlagSet("transfer", "--to NAME [--role R] [--kafka ADDR] [--group G] [--heartbeat-timeout D] [--timeout D]", transferAbout)
	o.register(fs, "neli", "warn", goneli.DefaultHeartbeatTimeout)
	fs.Lookup("name").Usage = "this client's name, the key of its transfer request (default <hostname>_<pid>_<time>)"
	fs.StringVar(&o.to, "to", "", "the name of the instance to hand leadership to ('neli run --name'; see 'neli status')")
	fs.StringVar(&o.role, "role", "", "the role to move, for a group started with a single --role (default: the single leader)")
	fs.DurationVar(&o.timeout, "timeout", 0, "how long to wait for --to to lead (default 30s, or 10 x --heartbeat-timeout if longer)")
	if err := o.parseFlags(fs, args, stdout); err != nil {
		return o, err
	}
	switch {
	case o.to == "":
		return o, badUsage("--to is required: the name of the instance to hand leadership to")
	case o.timeout < 0:
		return o, badUsage("--timeout %v must not be negative", o.timeout)
	case o.timeout == 0:
		o.timeout = max(30*time.Second, 10*o.heartbeatTimeout)
	}
	return o, nil
}

func runTransfer(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseTransfer(args, stdout)
	if err != nil {
		return 0, err
	}
	_, scr := o.logger(stderr)
	if err := o.checkReachable(); err != nil {
		return 0, err
	}
	config := o.config(scr)
	config.SetDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	res, err := goneli.Transfer(ctx, config, o.role, o.to)
	switch {
	case errors.Is(err, goneli.ErrNoSuchGroup):
		return 0, fmt.Errorf("group %q does not exist on %s: it has no members and no committed offsets; check --group", config.LeaderGroupID, o.kafka)
	case err != nil:
		return 0, err
	case res.Took == 0:
		fmt.Fprintf(stdout, "%s leads group %s already\n", res.To, quoteField(config.LeaderGroupID))
	default:
		fmt.Fprintf(stdout, "leadership of group %s moved from %s to %s in %v\n", quoteField(config.LeaderGroupID), res.From, res.To, res.Took.Round(time.Millisecond))
	}
	return exitOK, nil
}
