package goneli

import (
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// logForwarder passes librdkafka's log lines to scribe from a goroutine of its own. Clients write
// to its channel, which their config names (attach); it runs until stopped, which must wait until
// every client writing to it has finished closing, since a client logs until then.
type logForwarder struct {
	ch      chan kafka.LogEvent
	stop    chan struct{}
	running sync.WaitGroup
}

func startLogForwarder(log scribe.Scribe, name string) *logForwarder {
	f := &logForwarder{ch: make(chan kafka.LogEvent, 64), stop: make(chan struct{})}
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

// attach makes a client built from cm log through the forwarder.
func (f *logForwarder) attach(cm kafka.ConfigMap) {
	cm["go.logs.channel.enable"] = true
	cm["go.logs.channel"] = f.ch
}

// close stops the goroutine and waits for it.
func (f *logForwarder) close() {
	close(f.stop)
	f.running.Wait()
}
