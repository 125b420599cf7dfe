// Command scheduler is the service that service.yaml deploys to Kubernetes: a goneli contender that
// runs a batch job while it leads, and serves on one port /healthz (the readiness probe), /metrics
// (Prometheus, and the liveness probe) and /leader (who leads, as this member sees it, for any
// client of the Service). SIGTERM hands leadership over at once.
//
// It is built on NewCurator, not Run: /healthz and /metrics read the instance's Stats, and Run
// gives its caller no handle on the instance.
//
// Against a broker of your own (`go run ./cmd/neli broker` starts one on 127.0.0.1:9092), run two
// or three in different terminals with different -listen ports, stop the leader with Ctrl-C and
// watch another take over:
//
//	go run ./examples/kubernetes -kafka 127.0.0.1:9092 -listen 127.0.0.1:9101
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// defaultListen is where /healthz, /metrics and /leader are served: on every address of the
	// pod, since the kubelet probes the pod's IP.
	defaultListen = ":9100"
	// batchPause is how long one run of the leader work idles after its batch. Close waits for
	// the run under way, so it counts towards the stop bound.
	batchPause = time.Second
	// httpShutdown is how long requests in progress may delay the exit.
	httpShutdown = time.Second
)

// options are the command line's.
type options struct {
	kafka, group, name, address, listen string
	lease                               time.Duration
}

func parseOptions(args []string, output io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.kafka, "kafka", goneli.DefaultBootstrapServers, "Kafka bootstrap servers, host:port[,host:port...]")
	fs.StringVar(&o.group, "group", "billing-scheduler", "leader group shared by every replica")
	fs.StringVar(&o.name, "name", "", "this replica's name (default goneli's: <hostname>_<pid>_<time>)")
	fs.StringVar(&o.address, "address", "", "where clients reach this replica while it leads; /leader shows it")
	fs.StringVar(&o.listen, "listen", defaultListen, "HOST:PORT to serve /healthz, /metrics and /leader on")
	fs.DurationVar(&o.lease, "heartbeat-timeout", goneli.DefaultHeartbeatTimeout, "the lease (goneli's HeartbeatTimeout)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: this command takes flags only", fs.Arg(0))
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return o, fmt.Errorf("-listen %q: want HOST:PORT, for example :9100", o.listen)
	}
	return o, nil
}

func (o options) config() goneli.Config {
	return goneli.Config{
		KafkaConfig:      goneli.KafkaConfigMap{"bootstrap.servers": o.kafka},
		LeaderGroupID:    o.group,
		Name:             o.name,
		Address:          o.address,
		HeartbeatTimeout: goneli.Duration(o.lease),
		// /leader answers for followers too.
		ObserveLeader: true,
	}
}

// stopBound is how long the program may take to exit after SIGTERM: Close's bound, then the batch
// under way, then the HTTP server's shutdown. The pod's terminationGracePeriodSeconds must be
// longer, or a leader may be killed before it has left the group, and its successor wait out the
// group session instead of taking over at once.
func (o options) stopBound() (time.Duration, error) {
	closeBound, err := o.config().CloseBound()
	if err != nil {
		return 0, err
	}
	return closeBound + batchPause + httpShutdown, nil
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

// run contends until ctx ends, then hands leadership over.
func run(ctx context.Context, o options) error {
	bound, err := o.stopBound()
	if err != nil {
		return err
	}
	// The port is taken before the group is joined, so that a clash costs a line, not a
	// leadership change.
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	c, err := goneli.NewCurator(o.config())
	if err != nil {
		_ = ln.Close()
		return err
	}
	h, err := handler(c, o.group)
	if err != nil {
		_ = c.Close()
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Printf("serving /healthz, /metrics and /leader on %s; SIGTERM stops this within %v", ln.Addr(), bound)

	p, err := c.Background(func() { batch(c) })
	if err != nil {
		_ = c.Close()
		_ = srv.Close()
		return err
	}
	pulsed := make(chan error, 1)
	go func() { pulsed <- p.Await() }()
	var fatal error
	select {
	case <-ctx.Done():
	case fatal = <-pulsed:
	case err := <-served:
		fatal = fmt.Errorf("HTTP server: %w", err)
	}
	// Close hands leadership over at once; /healthz answers 503 meanwhile, taking this replica out
	// of the Service.
	closeErr := c.Close()
	if fatal == nil {
		fatal = p.Await()
	}
	shutdown, cancel := context.WithTimeout(context.Background(), httpShutdown)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	return errors.Join(fatal, closeErr)
}

// handler serves goneli's /healthz and /metrics, and /leader.
func handler(c goneli.Curator, group string) (http.Handler, error) {
	h, err := metrics.Handler(c, prometheus.Labels{"group": group})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", h)
	mux.Handle("/metrics", h)
	mux.HandleFunc("/leader", func(w http.ResponseWriter, _ *http.Request) {
		info, ok := c.Leader()
		if !ok {
			http.Error(w, "no leader known", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Name    string    `json:"name"`
			Address string    `json:"address,omitempty"`
			Token   int64     `json:"token"`
			Since   time.Time `json:"since"`
		}{info.Name, info.Address, info.Token, info.Since})
	})
	return mux, nil
}

// batch is one run of the leader work; Background runs it over and over while this replica leads.
func batch(c goneli.Curator) {
	token := c.Token()
	if token == 0 {
		return // the tenure ended before this run began
	}
	log.Printf("leader (token %d): running a billing batch", token)
	time.Sleep(batchPause)
}
