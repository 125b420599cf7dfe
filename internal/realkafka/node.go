package realkafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Node is one combined broker and controller of a cluster the tests started. Its methods are safe
// for concurrent use, but one node's control calls are meant to come from one test at a time.
type Node struct {
	ID   int32
	Addr string // the broker's listener, host:port

	c          *Cluster
	dir        string
	controller int               // the controller listener's port
	listeners  map[string]string // Options.Listeners' addresses as bound, by name

	mu   sync.Mutex
	proc *process // nil before the first start
}

// StopTimeout bounds a graceful stop; a node still running then is killed.
const StopTimeout = 2 * time.Minute

func (n *Node) propsPath() string { return filepath.Join(n.dir, "server.properties") }

// logPath is the node's log: everything its JVMs wrote, across restarts.
func (n *Node) logPath() string { return filepath.Join(n.dir, "kafka.log") }

// ListenerAddr is the address at which the node binds the listener of Options.Listeners called
// name (which it need not advertise); it fails tb for a name the cluster was not given.
func (n *Node) ListenerAddr(tb testing.TB, name string) string {
	tb.Helper()
	addr, ok := n.listeners[name]
	if !ok {
		tb.Fatalf("node %d has no listener %q", n.ID, name)
	}
	return addr
}

// LogPath is the file the node's JVM writes its log to, across restarts.
func (n *Node) LogPath() string { return n.logPath() }

// format formats the node's storage with the cluster's id.
func (n *Node) format(ctx context.Context) error {
	args := []string{"format", "-t", n.c.clusterID, "-c", n.propsPath()}
	for _, u := range n.c.opts.SCRAM {
		args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", u.Mechanism, u.Name, u.Password))
	}
	cmd := n.c.javaCmd(n.dir, "kafka.tools.StorageTool", args...)
	p, err := startProcess(n.c.sp, cmd, filepath.Join(n.dir, "format.log"), filepath.Join(n.c.dir, fmt.Sprintf("format-%d.pid", n.ID)))
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("formatting node %d: %v", n.ID, ctx.Err())
	}
	if _, err := p.exited(); err != nil {
		out, _ := os.ReadFile(filepath.Join(n.dir, "format.log"))
		return fmt.Errorf("formatting node %d (kafka.tools.StorageTool format): %v:\n%s", n.ID, err, lastLines(out, 15))
	}
	return nil
}

// launch starts the node's JVM and returns without waiting for it to serve.
func (n *Node) launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		if done, _ := n.proc.exited(); !done {
			return fmt.Errorf("node %d runs already (pid %d)", n.ID, n.proc.pid)
		}
	}
	cmd := n.c.javaCmd(n.dir, "kafka.Kafka", n.propsPath())
	p, err := startProcess(n.c.sp, cmd, n.logPath(), filepath.Join(n.dir, pidFileName))
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

func (n *Node) current() *process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// awaitReady waits until the node serves requests and lists itself as a broker, which a KRaft
// broker does only once the controller has unfenced it (BrokerServer.startup enables request
// processing after that). A node whose JVM exits meanwhile fails it at once.
func (n *Node) awaitReady(ctx context.Context) error {
	p := n.current()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	seed := cl.SeedBrokers()[0]
	return poll(ctx, fmt.Sprintf("node %d to serve at %s", n.ID, n.Addr), func() error {
		if done, err := p.exited(); done {
			msg := fmt.Errorf("node %d's JVM (pid %d) exited while starting: %v; its log is %s", n.ID, p.pid, err, n.logPath())
			if b, _ := os.ReadFile(n.logPath()); strings.Contains(string(b), "Address already in use") {
				return &stopPolling{errors.Join(errPortTaken, msg)}
			}
			return &stopPolling{msg}
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{} // none: only the brokers
		resp, err := seed.Request(ctx, req)
		if err != nil {
			return err
		}
		for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
			if b.NodeID == n.ID {
				return nil
			}
		}
		return fmt.Errorf("node %d does not list itself yet", n.ID)
	})
}

// stopPolling ends a poll at once with its error.
type stopPolling struct{ err error }

func (s *stopPolling) Error() string { return s.err.Error() }
func (s *stopPolling) Unwrap() error { return s.err }

// Pid is the pid of the node's JVM, 0 if it does not run.
func (n *Node) Pid() int {
	p := n.current()
	if p == nil {
		return 0
	}
	if done, _ := p.exited(); done {
		return 0
	}
	return p.pid
}

// Running reports whether the node's JVM runs (paused or not).
func (n *Node) Running() bool { return n.Pid() != 0 }

// Kill ends the node's JVM with SIGKILL, as a crash would, and returns once it has ended.
func (n *Node) Kill() error {
	p, err := n.running("kill")
	if err != nil {
		return err
	}
	p.kill()
	return nil
}

// Pause stops the node's JVM with SIGSTOP: it holds its connections and answers nothing, as a
// node in a long GC pause or a frozen VM would, until Resume. It returns once every thread of the
// JVM has stopped (process.awaitStopped), or with an error after pauseLimit.
func (n *Node) Pause() error {
	p, err := n.running("pause")
	if err != nil {
		return err
	}
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return p.awaitStopped(pauseLimit)
}

// pauseLimit bounds Pause's wait for every thread of the JVM to stop.
const pauseLimit = 10 * time.Second

// Resume continues a paused node with SIGCONT.
func (n *Node) Resume() error {
	p, err := n.running("resume")
	if err != nil {
		return err
	}
	return p.signal(syscall.SIGCONT)
}

// Stop ends the node gracefully (SIGTERM: a controlled shutdown that hands its partitions'
// leadership to other nodes) and returns once its JVM has ended; one still running after
// StopTimeout is killed, and Stop says so.
func (n *Node) Stop() error {
	p, err := n.running("stop")
	if err != nil {
		return err
	}
	if err := p.stop(StopTimeout); err != nil {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	return nil
}

// Start starts a node that was stopped or killed, with its data as it was, and returns once it
// serves (within StartTimeout).
func (n *Node) Start() error {
	if err := n.launch(); err != nil {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := n.awaitReady(ctx); err != nil {
		return fmt.Errorf("%w%s", err, n.c.tails(20))
	}
	return nil
}

// Restart stops the node gracefully and starts it again.
func (n *Node) Restart() error {
	if err := n.Stop(); err != nil {
		return err
	}
	return n.Start()
}

// running returns the node's process if it runs, else an error naming what could not be done.
func (n *Node) running(what string) (*process, error) {
	p := n.current()
	if p == nil {
		return nil, fmt.Errorf("cannot %s node %d: it was never started", what, n.ID)
	}
	if done, err := p.exited(); done {
		return nil, fmt.Errorf("cannot %s node %d: its JVM (pid %d) has ended (%v)", what, n.ID, p.pid, err)
	}
	return p, nil
}

// close kills the node's JVM, if it runs, for the cluster's Close.
func (n *Node) close() {
	if p := n.current(); p != nil {
		p.kill()
	}
}

func kerrOf(code int16) error { return kerr.ErrorForCode(code) }
