// Command neli is goneli from the shell: a demo of leader election on an embedded broker, a
// supervisor that runs a command only while its instance leads (or one copy per role it leads,
// with --roles or --role), a watcher that prints who leads a group without joining it, a status
// command that shows a group's members and leaders once, a command that moves leadership to a
// named instance, and a standalone embedded broker for local development.
//
//	neli demo   [--members 3] [--duration 30s] [--kafka ADDR]
//	neli run    [flags] [--roles N | --role NAME...] [--grace 10s] [--metrics-addr HOST:PORT] -- CMD [ARGS...]
//	neli watch  [--kafka ADDR] [--group G] [--heartbeat-timeout D] [--format text|json]
//	neli status [--kafka ADDR] [--group G] [--heartbeat-timeout D] [--format text|json]
//	neli transfer --to NAME [--role R] [--kafka ADDR] [--group G] [--heartbeat-timeout D] [--timeout D]
//	neli doctor [--kafka ADDR] [--group G] [--roles N] [--heartbeat-timeout D] [--format text|json]
//	neli broker [--listen 127.0.0.1:9092] [--topics a,b]
//	neli version
//
// Every subcommand takes --help.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/internal/kprobe"
	"github.com/goneli/goneli/internal/member"
	"github.com/obsidiandynamics/libstdgo/scribe"
	scribelogrus "github.com/obsidiandynamics/libstdgo/scribe/logrus"
	"github.com/sirupsen/logrus"
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses shared by the subcommands. A supervised command's own status passes through
// neli run unchanged, so these only describe neli's own failures.
const (
	exitOK    = 0
	exitFail  = 1 // something went wrong at run time (broker unreachable, overlap found, ...)
	exitUsage = 2 // bad command line
)

type subcommand struct {
	name    string
	summary string
	// run returns the exit status, or an error that ends the command with a one-line message.
	run func(args []string, stdout, stderr io.Writer) (int, error)
}

func subcommands() []subcommand {
	return []subcommand{
		{"demo", "run several contenders on an embedded broker and disrupt their leaders", runDemo},
		{"run", "run a command only while this instance is the leader (a copy per role led, with --roles)", runRun},
		{"watch", "print each change of leader of a group, without joining it", runWatch},
		{"status", "show a group once: stable or not, who is in it, who leads, without joining it", runStatus},
		{"transfer", "move leadership to a named instance, gracefully, without joining the group", runTransfer},
		{"doctor", "check that the cluster will work for a group (reach, version, session, topic, ACLs), without joining it", runDoctor},
		{"broker", "run a standalone embedded Kafka-protocol broker for local development", runBroker},
		{"version", "print the versions of neli, goneli, librdkafka and Go", runVersion},
	}
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	case "member":
		// Hidden: the contender process that neli demo starts by re-executing this binary.
		return member.Main(args[1:])
	}
	for _, sc := range subcommands() {
		if sc.name != args[0] {
			continue
		}
		status, err := sc.run(args[1:], stdout, stderr)
		switch {
		case errors.Is(err, errHelp):
			return exitOK
		case err != nil:
			return fail(stderr, sc.name, err)
		}
		return status
	}
	fmt.Fprintf(stderr, "neli: unknown command %q; use one of demo, run, watch, status, transfer, doctor, broker, version (neli --help)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "neli: leader election over Apache Kafka (goneli)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: neli COMMAND [flags]")
	fmt.Fprintln(w)
	for _, sc := range subcommands() {
		fmt.Fprintf(w, "  %-8s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'neli COMMAND --help' for the flags of a command.")
}

// usageError is a bad command line. Its message is printed on one line, followed by a pointer to
// the subcommand's --help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func badUsage(format string, args ...interface{}) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// fail prints err on one line and returns the matching exit status.
func fail(stderr io.Writer, cmd string, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "neli %s: %s (see 'neli %s --help')\n", cmd, msg, cmd)
		return exitUsage
	}
	fmt.Fprintf(stderr, "neli %s: %s\n", cmd, msg)
	return exitFail
}

// newFlagSet returns a flag set that reports errors through parse instead of printing them, so
// that a mistake costs the user one line rather than the whole usage text.
func newFlagSet(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("neli "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: neli %s %s\n\n%s\n\nFlags (-flag and --flag are the same):\n", name, synopsis, about)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args. For --help it prints the usage on stdout and returns errHelp.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return errHelp
	}
	if err != nil {
		return badUsage("%v", err)
	}
	return nil
}

var errHelp = errors.New("help requested")

// parseFlags parses the arguments of a command that takes flags alone into fs, on which c has
// registered, and checks the common flags.
func (c *common) parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return badUsage("unexpected argument %q", fs.Arg(0))
	}
	return c.validate()
}

// common holds the flags shared by the subcommands that contend for leadership.
type common struct {
	kafka            string
	group            string
	topic            string
	name             string
	heartbeatTimeout time.Duration
	logLevel         string
	logFormat        string
	kafkaSettings
	fs *flag.FlagSet // to tell whether --kafka was given
}

func (c *common) register(fs *flag.FlagSet, defaultGroup, defaultLevel string, defaultLease time.Duration) {
	fs.StringVar(&c.kafka, "kafka", c.kafka, "Kafka bootstrap servers, host[:port][,host[:port]...] (port 9092 where none is given, as librdkafka takes it)")
	fs.StringVar(&c.group, "group", defaultGroup, "leader group ID shared by all contenders")
	fs.StringVar(&c.topic, "topic", "", "leader topic (default <group>.neli)")
	fs.StringVar(&c.name, "name", "", "this instance's name (default <hostname>_<pid>_<time>)")
	fs.DurationVar(&c.heartbeatTimeout, "heartbeat-timeout", defaultLease,
		"the lease; the group session timeout is twice this and must be allowed by the broker's group.min.session.timeout.ms")
	fs.StringVar(&c.logLevel, "log-level", defaultLevel, "log level: trace, debug, info, warn, error or off")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	c.kafkaSettings.register(fs)
	c.fs = fs
}

func (c *common) validate() error {
	if c.group == "" {
		return badUsage("--group must not be empty")
	}
	if c.topic == "" && !validTopic(c.group+".neli") {
		return badUsage("--group %q cannot name the leader topic: %q is not a valid Kafka topic name (1 to 249 characters of [a-zA-Z0-9._-]); pass --topic", c.group, c.group+".neli")
	}
	if c.topic == "" && c.fs != nil && flagSet(c.fs, "topic") {
		// Taken as no --topic, it would silently put the group on <group>.neli.
		return badUsage("--topic must not be empty: leave it out for <group>.neli")
	}
	if c.topic != "" && !validTopic(c.topic) {
		return badUsage("--topic %q: a Kafka topic name is 1 to 249 characters of [a-zA-Z0-9._-], and not . or ..", c.topic)
	}
	if c.heartbeatTimeout < goneli.MinHeartbeatTimeout {
		return badUsage("--heartbeat-timeout %v is too short: the minimum is %v", c.heartbeatTimeout, goneli.MinHeartbeatTimeout)
	}
	if c.heartbeatTimeout > goneli.MaxHeartbeatTimeout {
		return badUsage("--heartbeat-timeout %v is too long: the maximum is %v, as the rebalance timeout is twice the lease and brokers allow sessions of at most 30 min by default", c.heartbeatTimeout, goneli.MaxHeartbeatTimeout)
	}
	if _, err := logrusLevel(c.logLevel); err != nil {
		return err
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return badUsage("--log-format %q: use text or json", c.logFormat)
	}
	servers, err := c.resolve(c.kafka, c.fs != nil && flagSet(c.fs, "kafka"))
	if err != nil {
		return err
	}
	c.kafka = servers
	return nil
}

func logrusLevel(name string) (logrus.Level, error) {
	switch strings.ToLower(name) {
	case "trace":
		return logrus.TraceLevel, nil
	case "debug":
		return logrus.DebugLevel, nil
	case "info":
		return logrus.InfoLevel, nil
	case "warn", "warning":
		return logrus.WarnLevel, nil
	case "error":
		return logrus.ErrorLevel, nil
	case "off", "none":
		return logrus.PanicLevel, nil
	}
	return 0, badUsage("--log-level %q: use trace, debug, info, warn, error or off", name)
}

// logger builds the logrus logger for neli's own messages and a scribe that routes goneli's (and
// librdkafka's) messages into it.
func (c *common) logger(w io.Writer) (*logrus.Logger, scribe.Scribe) {
	l := logrus.New()
	l.SetOutput(w)
	level, _ := logrusLevel(c.logLevel)
	l.SetLevel(level)
	if c.logFormat == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05.000"})
	}
	for _, key := range c.exposed {
		l.Warnf("-X %s puts a secret on the command line, where ps shows it to every user of this host; use -F FILE or %s%s instead",
			key, envPrefix, strings.ToUpper(strings.ReplaceAll(key, ".", "_")))
	}
	return l, scribe.New(scribelogrus.Bind(l))
}

// config builds the goneli configuration from the common flags. librdkafka's lines go through the
// same logger as neli's own (one format, one level), unless -X go.logs.channel.enable=false leaves
// them to librdkafka, which saves an idle instance about a fifth of its CPU (docs/performance.md).
func (c *common) config(s scribe.Scribe) goneli.Config {
	kc := c.kafkaConfig()
	if _, set := kc["go.logs.channel.enable"]; !set {
		kc["go.logs.channel.enable"] = true
	}
	return goneli.Config{
		KafkaConfig:      kc,
		LeaderGroupID:    c.group,
		LeaderTopic:      c.topic,
		Name:             c.name,
		HeartbeatTimeout: goneli.Duration(c.heartbeatTimeout),
		Scribe:           s,
	}
}

// kafkaConfig is a copy of the resolved Kafka properties, or bootstrap.servers alone before they
// are resolved.
func (c *common) kafkaConfig() goneli.KafkaConfigMap {
	kc := goneli.KafkaConfigMap{"bootstrap.servers": c.kafka}
	for k, v := range c.resolved {
		kc[k] = v
	}
	return kc
}

// reachTimeout bounds the check that the broker is there at all.
const reachTimeout = 5 * time.Second

// checkReachable fails fast when no bootstrap server answers. goneli itself would keep retrying
// for ever, which is right for a service but leaves someone who mistyped --kafka staring at a
// silent terminal. Over a plaintext listener it also checks that the server speaks Kafka, since a
// port of some other service accepts the connection and then never answers librdkafka.
func (c *common) checkReachable() error {
	servers := c.kafka
	if len(kprobe.Servers(servers)) == 0 {
		if c.fs == nil || flagSet(c.fs, "kafka") {
			return badUsage("--kafka must not be empty: want host[:port][,host[:port]...]")
		}
		return badUsage("bootstrap.servers (from -X, -F or NELI_X_BOOTSTRAP_SERVERS) must not be empty: " +
			"want host[:port][,host[:port]...], or leave it out to use --kafka")
	}
	probe := kprobe.InTheClear(c.kafkaConfig()["security.protocol"])
	var errs []string
	for _, s := range kprobe.Servers(servers) {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return badUsage("--kafka %q: want host[:port][,host[:port]...]", servers)
		}
		conn, err := net.DialTimeout("tcp", s, reachTimeout)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if probe {
			err = kprobe.SpeaksKafka(conn, reachTimeout)
		}
		_ = conn.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Sprintf("%s accepts connections but does not answer as Kafka: %v", s, err))
	}
	return fmt.Errorf("cannot reach Kafka at %s (%s); start one (for example 'neli broker' or 'docker compose up -d') or fix --kafka",
		servers, strings.Join(errs, "; "))
}

// validTopic reports whether Kafka accepts name as a topic name.
func validTopic(name string) bool {
	return name != "" && len(name) <= 249 && name != "." && name != ".." && goneli.Sanitise(name) == name
}

// flagSet reports whether the flag called name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}
