// Package fencetrace tells goneli's own test members (internal/member) when a FencedProducer
// initialised for a tenure and when it called CommitTransaction. A member logs both on the host's
// wall clock, which is what lets the chaos suite check that no transaction's commit began after a
// successor had fenced its tenure: the commit call happens inside FencedProducer.Transaction,
// where a caller cannot time it. It is not part of goneli's API.
package fencetrace

import (
	"sync/atomic"
	"time"
)

// Hooks are called synchronously by every FencedProducer of the process; they must be quick.
type Hooks struct {
	// Initialised is called when the producer with transactional id txid has initialised for
	// token at LeaderAcquired, before the barrier hears of it.
	Initialised func(txid string, token int64)
	// Committing is called just before each CommitTransaction call of a transaction of token,
	// with the time of the call.
	Committing func(txid string, token int64, at time.Time)
}

var hooks atomic.Pointer[Hooks]

// Set installs h for the whole process, replacing any earlier Hooks; nil removes them.
func Set(h *Hooks) { hooks.Store(h) }

// Get returns the installed Hooks, or nil.
func Get() *Hooks { return hooks.Load() }
