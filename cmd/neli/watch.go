package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/goneli/goneli"
	"github.com/sirupsen/logrus"
)

const watchAbout = `Prints each change of leader of --group as it happens, one line each on stdout: the time
it was seen, the leader's name, its address if it has one ('neli run --address'), its
fencing token (the NELI_TOKEN its 'neli run' gives CMD) and since when it has led. "no leader" means the last leader's heartbeats have not been
seen for --heartbeat-timeout; give the lease the contenders use. On start it shows the
current leader within one of its heartbeats, and when nobody leads it says why at once: the
group or the topic does not exist, the partition has no heartbeats, or the newest one is
too old (with its sender and age).

For a group with roles ('neli run --roles' or '--role'), every line names the role it is
about, and each role is followed on its own: role i is partition i of the leader topic.
The roles are those the leader topic has partitions for when watch starts.

It only reads the heartbeats on the leader topic and never joins the group, so watching
cannot become leader or cause a rebalance. SIGINT or SIGTERM stops it with status 0.

  text: 2026-11-21T16:30:01.123Z leader a token 42 since 2026-11-21T16:29:58.950Z
        2026-11-21T16:30:09.004Z no leader (a's heartbeats stopped; its token was 42)
        2026-11-21T16:30:12.310Z leader b at http://b.internal:8080 token 97 since 2026-11-21T16:30:12.201Z
        2026-11-21T16:30:01.123Z role billing leader a token 7 since 2026-11-21T16:29:58.950Z
        2026-11-21T16:30:09.004Z role billing no leader (a's heartbeats stopped; its token was 7)
  json: {"time":"...","event":"leader","leader":"a","tenure":"3","token":42,"since":"..."}
        {"time":"...","event":"no-leader","last_leader":"a","last_token":42}
        {"time":"...","role":"billing","partition":1,"event":"leader","leader":"a",...}`

// watchTime is how watch prints instants: to the millisecond, with the zone, so that lines from
// several hosts can be compared.
const watchTime = "2006-01-02T15:04:05.000Z07:00"

// readerOptions are the flags of the commands that only read a group, watch and status.
type readerOptions struct {
	common
	format string
}

// parseReader parses the flags of watch or status. nameUsage and leaseUsage say what --name and
// --heartbeat-timeout mean to the command.
func parseReader(cmd, about, formatUsage, nameUsage, leaseUsage string, args []string, stdout io.Writer) (readerOptions, error) {
	var o readerOptions
	o.kafka = "localhost:9092"
	fs := newFlagSet(cmd, "[--kafka ADDR] [--group G] [--topic T] [--heartbeat-timeout D] [--format text|json]", about)
	// Quieter than run by default: stdout is the point of these commands, and the logs share the
	// terminal.
	o.register(fs, "neli", "warn", goneli.DefaultHeartbeatTimeout)
	fs.StringVar(&o.format, "format", "text", formatUsage)
	fs.Lookup("name").Usage = nameUsage
	fs.Lookup("heartbeat-timeout").Usage = leaseUsage
	if err := o.parseFlags(fs, args, stdout); err != nil {
		return o, err
	}
	if o.format != "text" && o.format != "json" {
		return o, badUsage("--format %q: use text or json", o.format)
	}
	return o, nil
}

func parseWatch(args []string, stdout io.Writer) (readerOptions, error) {
	return parseReader("watch", watchAbout, "output format: text or json (one object per line)",
		"this watcher's name, seen by the broker as client.id goneli-<name>-observer (default <hostname>_<pid>_<time>)",
		"the contenders' lease: a leader unseen for this long is reported gone", args, stdout)
}

// start sets up logging, checks that Kafka is there, and returns the goneli config and a context
// that SIGINT or SIGTERM ends; stop releases the signals.
func (o *readerOptions) start(stderr io.Writer) (log *logrus.Logger, config goneli.Config, ctx context.Context, stop context.CancelFunc, err error) {
	log, scr := o.logger(stderr)
	if err := o.checkReachable(); err != nil {
		return nil, config, nil, nil, err
	}
	config = o.config(scr)
	config.SetDefaults()
	ctx, stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	return log, config, ctx, stop, nil
}

func runWatch(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseWatch(args, stdout)
	if err != nil {
		return 0, err
	}
	log, config, ctx, stop, err := o.start(stderr)
	if err != nil {
		return 0, err
	}
	defer stop()

	p := &watchPrinter{w: stdout, json: o.format == "json", now: time.Now}
	log.Infof("neli watch: following the leader of group %s on topic %s", config.LeaderGroupID, config.LeaderTopic)
	// A live leader shows up within one of its heartbeats; silence could mean anything, so say at
	// once why nobody leads.
	st, err := goneli.Describe(ctx, config)
	switch {
	case ctx.Err() != nil:
		log.Infof("neli watch: stopped")
		return exitOK, nil
	case errors.Is(err, goneli.ErrNoSuchGroup):
		p.noLeader("", 0, fmt.Sprintf("group %s does not exist (yet): no member has joined it; check --group", quoteField(config.LeaderGroupID)))
	case err != nil:
		log.Warnf("neli watch: cannot describe the group (%v); following the heartbeats only", err)
	case len(st.Roles) == 0:
		p.noLeader("", 0, fmt.Sprintf("topic %s does not exist (yet); check --group or --topic", config.LeaderTopic))
	default:
		for _, r := range st.Roles {
			// A partition with no records has no role name yet: with several, "#i" stands for partition i.
			if r.Role == "" && len(st.Roles) > 1 {
				r.Role = fmt.Sprintf("#%d", r.Partition)
			}
			switch {
			case r.Leader.Name != "":
				// Watch reports it with its first heartbeat.
			case r.Newest.Name == "":
				p.noLeader(r.Role, r.Partition, "no heartbeats yet")
			default:
				p.noLeader(r.Role, r.Partition, fmt.Sprintf("newest %s from %s, %s old", r.Newest.Kind, r.Newest.Name, r.Newest.Age.Round(time.Millisecond)))
			}
		}
	}
	// Watch returns only with an error: context.Canceled is the signal's doing, and the end of a
	// successful watch.
	if err := goneli.Watch(ctx, config, p.print); !errors.Is(err, context.Canceled) {
		return 0, err
	}
	log.Infof("neli watch: stopped")
	return exitOK, nil
}

// watchPrinter turns leader changes into lines. It is called only from Watch's goroutine.
type watchPrinter struct {
	w    io.Writer
	json bool
	now  func() time.Time
	// last is each partition's leader before a "no leader", which carries no name of its own.
	last map[int32]goneli.LeaderInfo
}

// watchRecord is one line of --format json. Fields that do not apply to the event are left out;
// role and partition apply only to groups with roles, so the single leader's records are as they
// were before roles existed.
type watchRecord struct {
	Time       string `json:"time"`
	Role       string `json:"role,omitempty"`
	Partition  *int32 `json:"partition,omitempty"`
	Event      string `json:"event"` // "leader" or "no-leader"
	Leader     string `json:"leader,omitempty"`
	Address    string `json:"address,omitempty"`
	Tenure     string `json:"tenure,omitempty"`
	Token      int64  `json:"token,omitempty"`
	Since      string `json:"since,omitempty"`
	LastLeader string `json:"last_leader,omitempty"`
	LastToken  int64  `json:"last_token,omitempty"`
	// Reason says why nobody leads, on the lines printed when watch starts.
	Reason string `json:"reason,omitempty"`
}

// noLeader prints a "no leader" line with the reason, for a role that nobody leads when watch
// starts.
func (p *watchPrinter) noLeader(role string, partition int32, reason string) {
	r := watchRecord{Time: p.now().Format(watchTime), Role: role, Event: "no-leader", Reason: reason}
	if role != "" {
		r.Partition = &partition
	}
	p.write(r)
}

func (p *watchPrinter) print(info goneli.LeaderInfo) {
	if p.last == nil {
		p.last = map[int32]goneli.LeaderInfo{}
	}
	r := watchRecord{Time: p.now().Format(watchTime), Role: info.Role}
	if info.Role != "" {
		r.Partition = &info.Partition
	}
	if info.Name == "" {
		last := p.last[info.Partition]
		r.Event, r.LastLeader, r.LastToken = "no-leader", last.Name, last.Token
	} else {
		r.Event, r.Leader, r.Address, r.Tenure, r.Token, r.Since = "leader", info.Name, info.Address, info.Tenure, info.Token, info.Since.Format(watchTime)
		p.last[info.Partition] = info
	}
	p.write(r)
}

func (p *watchPrinter) write(r watchRecord) {
	if p.json {
		line, _ := json.Marshal(r) // cannot fail: strings and integers only
		fmt.Fprintf(p.w, "%s\n", line)
		return
	}
	at := r.Time
	if r.Role != "" {
		at += " role " + quoteField(r.Role)
	}
	switch {
	case r.Event == "leader" && r.Address != "":
		fmt.Fprintf(p.w, "%s leader %s at %s token %d since %s\n", at, r.Leader, quoteField(r.Address), r.Token, r.Since)
	case r.Event == "leader":
		fmt.Fprintf(p.w, "%s leader %s token %d since %s\n", at, r.Leader, r.Token, r.Since)
	case r.LastLeader != "":
		fmt.Fprintf(p.w, "%s no leader (%s's heartbeats stopped; its token was %d)\n", at, r.LastLeader, r.LastToken)
	case r.Reason != "":
		fmt.Fprintf(p.w, "%s no leader (%s)\n", at, r.Reason)
	default:
		fmt.Fprintf(p.w, "%s no leader\n", at)
	}
}

// quoteField keeps a role one field of a text line: a name with spaces, quotes or control
// characters is printed quoted, as Go quotes strings; any other name as it is.
func quoteField(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' }) {
		return strconv.Quote(s)
	}
	return s
}
