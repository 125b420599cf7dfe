package driver

import (
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// LogForwarder passes librdkafka's log lines to scribe from a goroutine of its own, when the
// application asked for that (Config.forwardsLogs). Clients write to its channel, which their config
// names (attach); it runs until stopped, which must wait until every client writing to it has
// finished closing, since a client logs until then.
//
// Forwarding is off unless asked for because of what it costs an idle member: confluent-kafka-go
// reads a client's log queue in a goroutine that waits in librdkafka for 100 ms at a time, and a
// Go program that waits in a C call for longer than the scheduler's monitor allows has its
// processor taken away and handed back on every return, ten times a second per client; that was
// about a third of an idle follower's CPU (docs/performance.md). Left off, librdkafka prints its
// lines on stderr itself, as it does for any confluent-kafka-go client, and as it did under goneli
// v0.5.0.
type LogForwarder struct {
	ch      chan kafka.LogEvent
	stop    chan struct{}
	running sync.WaitGroup
	off     bool
}

func StartLogForwarder(log scribe.Scribe, name string, on bool) *LogForwarder {
	if !on {
		return &LogForwarder{off: true}
	}
	f := &LogForwarder{ch: make(chan kafka.LogEvent, 64), stop: make(chan struct{})}
	f.running.Add(1)
	go func() {
		defer f.running.Done()
		for {
			select {
			case <-f.stop:
				return
			case l := <-f.ch:
				logger := log.D()
				switch {
				case l.Level <= 3:
					logger = log.E()
				case l.Level == 4:
					logger = log.W()
				case l.Level <= 6:
					logger = log.I()
				}
				logger("goneli %s: librdkafka %s [%s] %s", name, l.Name, l.Tag, l.Message)
			}
		}
	}()
	return f
}

// attach makes a client built from cm log through the forwarder, if it forwards.
func (f *LogForwarder) Attach(cm kafka.ConfigMap) {
	if f.off {
		return
	}
	cm["go.logs.channel.enable"] = true
	cm["go.logs.channel"] = f.ch
}

// close stops the goroutine and waits for it.
func (f *LogForwarder) Close() {
	if f.off {
		return
	}
	close(f.stop)
	f.running.Wait()
}
