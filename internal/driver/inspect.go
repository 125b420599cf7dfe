package driver

import (
	"time"

	"github.com/goneli/goneli/internal/core"
	"github.com/goneli/goneli/internal/sidechan"
)

// What the root package's tests reach into: they assemble an instance on scripted clients
// (driver_test.go there) and look at, or change, what the driver holds between cycles.

// ClientID is the group consumer's client.id, by which the group check finds this instance.
func (d *Driver) ClientID() string {
	return d.clientID
}

// ClientConfigs are the configurations the driver makes its clients from.
func (d *Driver) ClientConfigs() (consumer, producer, admin *KafkaConfigMap) {
	return d.confs.consumer, d.confs.producer, d.confs.admin
}

// UseWire replaces goneli's own connection with w, which then describes the group and reads the
// ends of an assignment; nil leaves all of it to the librdkafka clients. Heartbeats of several roles
// go out through the producer either way. The connection replaced is closed.
func (d *Driver) UseWire(w sidechan.Channel) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.check.wire != nil && d.check.wire != w {
		d.check.wire.Close()
	}
	d.check.wire, d.wire = w, nil
}

// Inspect runs f with the loop's and the machine's locks held, on the driver's Config (which f may
// change: a test replaces a client provider), the machine and the roles.
func (d *Driver) Inspect(f func(c *Config, m *core.Machine, roles []*core.Role)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mm.Lock()
	defer d.mm.Unlock()
	f(&d.config, d.m, d.parts)
}

// Detached is a driver with a machine of no roles and no clients, on clk from base, for tests of
// the API type that never cycle: it answers Now, Yielding and the counters.
func Detached(clk core.Clock, base time.Time) *Driver {
	return &Driver{clock: clk, base: base, m: &core.Machine{Clock: clk, Base: base}}
}
