package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/goneli/goneli/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
)

const brokerAbout = `Runs an embedded Kafka-protocol broker (kfake, in memory) for local development and for
trying 'neli run' in several terminals. It is not Kafka: nothing is persisted, and it is
meant for one machine. Its group.min.session.timeout.ms is lowered so that short leases
(--heartbeat-timeout down to 500ms) work. Stop it with Ctrl-C.`

func runBroker(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlagSet("broker", "[--listen 127.0.0.1:9092] [--topics a,b]", brokerAbout)
	listen := fs.String("listen", "127.0.0.1:9092", "loopback address to listen on; port 0 picks a free one")
	topics := fs.String("topics", "", "comma-separated topics to create up front, one partition each")
	minSession := fs.Duration("group-min-session-timeout", kafkatest.DefaultGroupMinSessionTimeout,
		"the broker's group.min.session.timeout.ms; a lease needs a session of about 1.25 times its length")
	err := parse(fs, args, stdout)
	if err == nil && fs.NArg() > 0 {
		err = badUsage("unexpected argument %q", fs.Arg(0))
	}
	var port int
	if err == nil {
		port, err = loopbackPort(*listen)
	}
	if err == nil && *minSession <= 0 {
		err = badUsage("--group-min-session-timeout %v must be positive", *minSession)
	}
	if err != nil {
		return 0, err
	}

	opts := append([]kfake.Opt{kfake.Ports(port)}, kafkatest.MinSession(*minSession)...)
	var seed []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			if !validTopic(t) {
				return 0, badUsage("--topics: %q is not a valid Kafka topic name (1 to 249 characters of [a-zA-Z0-9._-], not . or ..)", t)
			}
			seed = append(seed, t)
		}
	}
	if len(seed) > 0 {
		opts = append(opts, kfake.SeedTopics(1, seed...))
	}
	b, err := kafkatest.Start(opts...)
	if err != nil {
		return 0, fmt.Errorf("cannot listen on %s (%v); pick another address with --listen", *listen, err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)

	fmt.Fprintf(stdout, "neli broker: listening on %s\n", b.Addr)
	fmt.Fprintf(stdout, "neli broker: group.min.session.timeout.ms=%d; topics: %s\n", minSession.Milliseconds(), orNone(seed))
	fmt.Fprintf(stdout, "neli broker: try 'neli run --kafka %s --heartbeat-timeout 1s -- CMD' in two terminals; Ctrl-C stops the broker\n", b.Addr)
	s := <-sig
	b.Close()
	fmt.Fprintf(stdout, "neli broker: %v: stopped\n", s)
	return exitOK, nil
}

// loopbackPort checks that addr is a loopback host and a port: kfake binds 127.0.0.1 and
// advertises that address to clients, so another host could not use it anyway.
func loopbackPort(addr string) (int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, badUsage("--listen %q: want host:port, for example 127.0.0.1:9092", addr)
	}
	if host != "" && host != "127.0.0.1" && host != "localhost" {
		return 0, badUsage("--listen %q: the embedded broker listens on 127.0.0.1 only", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return 0, badUsage("--listen %q: the port must be a number from 0 to 65535", addr)
	}
	return port, nil
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none (goneli creates its leader topic itself)"
	}
	return strings.Join(list, ", ")
}
