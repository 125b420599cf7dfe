package goneli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/obsidiandynamics/libstdgo/scribe"
)

// Leadership is what a FencedProducer is bound to: a Curator (NewCurator, or New's Neli asserted
// to Curator) or a Role of NewRoles. Another implementation works too, given
// FencedConfig.TransactionalID and bootstrap.servers, but only goneli's own get their producer
// initialised at acquisition, before IsLeader turns true (see FencedProducer).
type Leadership interface {
	// IsLeader reports whether the lease is held now.
	IsLeader() bool
	// Token is the current tenure's fencing token while leading, 0 otherwise; a FencedProducer
	// treats a new token as a new tenure.
	Token() int64
}

// fencedSource is implemented by goneli's own Leadership values: it gives the instance and the
// role, from which the transactional id, the producer's settings and the acquisition hook come.
type fencedSource interface {
	fencedBinding() (*neli, *part)
}

func (n *neli) fencedBinding() (*neli, *part)  { return n, n.parts[0] }
func (r roleOf) fencedBinding() (*neli, *part) { return r.n, r.p }

// FencedConfig configures a FencedProducer.
type FencedConfig struct {
	// KafkaConfig holds settings for the transactional producer, laid over the instance's
	// Config.KafkaConfig (whose bootstrap.servers and security settings it inherits; the
	// consumer's own keys are left out). It must not set transactional.id (see TransactionalID)
	// nor enable.idempotence=false, which a transactional producer cannot do without.
	KafkaConfig KafkaConfigMap
	// TransactionalID is shared by every contender of the group, for the role: that is what lets
	// a successor fence its predecessors. Default: "goneli-fenced." + LeaderGroupID, with "." and
	// the role's name appended for a role of NewRoles. Set it only to move a deployment to another
	// id, on every contender at once.
	TransactionalID string
	// Timeout bounds InitTransactions, each commit and abort, and Close. Default: 10 s.
	Timeout time.Duration
	// Trace, if set, hears of the producer's fencing steps as they happen, for metrics or an
	// audit of which tenure could commit when. Default: nil.
	Trace *FencedTrace
}

// FencedTrace follows one FencedProducer's steps, in the manner of net/http/httptrace. Its
// functions are called synchronously on the goroutine taking the step, so they must return
// quickly; any of them may be nil.
type FencedTrace struct {
	// Initialised is called once the producer has initialised for the tenure of token at
	// LeaderAcquired, before the barrier hears of the acquisition: from then on, no earlier
	// tenure of the group (role) can commit.
	Initialised func(token int64)
	// Committing is called just before each CommitTransaction of a transaction of token. A
	// commit that begins after a successor's Initialised is refused by the broker.
	Committing func(token int64)
}

// DefaultFencedTimeout is FencedConfig.Timeout's default.
const DefaultFencedTimeout = 10 * time.Second

// FencedProducer writes to Kafka on behalf of a tenure: every write is a Kafka transaction that
// commits only while the tenure that began it is current, and that the broker refuses once a
// successor has initialised its own FencedProducer. It is built on librdkafka's transactional
// producer: every contender of the group (of a role) uses one transactional.id, and each new
// tenure initialises it (InitTransactions), which bumps the producer epoch at the broker, aborts
// any transaction a predecessor left open and fences the predecessor's producer for good.
//
// A producer bound to a Curator or a Role of this package initialises on LeaderAcquired, before
// the barrier is called and so before IsLeader turns true (delaying both by the initialisation,
// 20-50 ms on a local broker, at most Timeout): once a successor leads, no transaction of an
// earlier tenure can commit, however long its process was paused. A producer bound to another
// Leadership initialises at its first write of a tenure, so the fence then starts from the
// successor's first write.
//
// Before committing, a transaction checks that the tenure is still this instance's (Token
// unchanged and the lease held) and aborts otherwise, so a deposed leader learns at once even
// where no successor has initialised yet. Either way the write fails with a *FencedWriteError
// (errors.Is ErrWriteFenced) and consumers reading with isolation.level=read_committed never see
// its records. Consumers reading uncommitted records are not protected.
//
// Cost: each Send or Transaction is one transaction, three requests in sequence when it writes to
// one partition: AddPartitionsToTxn (one per partition, batched), Produce, and EndTxn, after which
// the broker writes a commit marker to each partition touched. A plain idempotent produce costs
// only the Produce. On the embedded test broker (coretest's BenchmarkFencedSend, 2 cores) a Send
// took 2.3-2.4 ms whether it carried 1 record or 10, so batch records into one Send where
// throughput matters; against a real cluster expect about three round trips plus the
// replication of the records and the markers (acks=all). Each acquisition adds a producer and
// an InitTransactions (20-50 ms on the embedded broker).
//
// What is not fenced: writes that do not go through this producer, to Kafka or elsewhere. Stamp
// those with the fencing token (Curator.Token) and have the downstream store refuse lower ones.
//
// A FencedProducer is safe for concurrent use; its transactions run one at a time.
type FencedProducer struct {
	lead    Leadership
	txid    string
	conf    kafka.ConfigMap
	timeout time.Duration
	trace   *FencedTrace
	log     scribe.Scribe
	name    string
	detach  func()
	// principal and group name a refused transactional id (transactionalAuthorizationError).
	principal, group string

	// sem serialises transactions, (re)initialisation and Close; a channel rather than a mutex so
	// that the acquisition hook and Close can give up waiting.
	sem chan struct{}
	// Guarded by sem.
	p      *kafka.Producer
	drain  chan struct{} // closed when p's event channel has been drained to its end
	token  int64         // the tenure p was initialised for
	fenced error         // the broker fenced p: no transaction goes through it any more
	closed bool

	closeOnce sync.Once
	closeErr  error
}

// NewFencedProducer binds a transactional producer to lead (see FencedProducer). It makes no
// Kafka client until the first acquisition or write. Close it before closing lead.
func NewFencedProducer(lead Leadership, cfg FencedConfig) (*FencedProducer, error) {
	if lead == nil {
		return nil, &ConfigError{Field: "NewFencedProducer's lead", Reason: "must not be nil"}
	}
	if cfg.Timeout < 0 {
		return nil, &ConfigError{Field: "FencedConfig.Timeout", Value: cfg.Timeout, Reason: "must not be negative (0 means the default, 10s)"}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultFencedTimeout
	}
	for k, v := range cfg.KafkaConfig {
		switch k {
		case "transactional.id":
			return nil, &ConfigError{Field: `FencedConfig.KafkaConfig["transactional.id"]`, Value: v,
				Reason: "the transactional id is derived from the group (and role) so that every contender shares it; set FencedConfig.TransactionalID to override it"}
		case "enable.idempotence":
			if fmt.Sprint(v) != "true" {
				return nil, &ConfigError{Field: `FencedConfig.KafkaConfig["enable.idempotence"]`, Value: v,
					Reason: "a transactional producer is idempotent; leave it unset"}
			}
		}
	}
	f := &FencedProducer{lead: lead, timeout: cfg.Timeout, trace: cfg.Trace, txid: cfg.TransactionalID, sem: make(chan struct{}, 1), detach: func() {}}
	base := kafka.ConfigMap{}
	var hooks *acquireHooks
	f.log = scribe.New(scribe.LoggerFactories{scribe.All: scribe.Fac(scribe.Nop)})
	if src, ok := lead.(fencedSource); ok {
		n, p := src.fencedBinding()
		for k, v := range n.config.KafkaConfig {
			base[k] = v
		}
		for _, k := range consumerOnlyKeys {
			delete(base, k)
		}
		// The heartbeat producer's settings are its own; a transactional producer must be idempotent.
		delete(base, "enable.idempotence")
		if f.txid == "" {
			f.txid = fencedPrefix + n.config.LeaderGroupID
			if p.Name != "" {
				f.txid += "." + p.Name
			}
		}
		f.log, f.name = n.log, n.config.Name
		f.principal, f.group = principalOf(n.config), n.config.LeaderGroupID
		hooks = &p.hooks
	}
	if f.txid == "" {
		return nil, &ConfigError{Field: "FencedConfig.TransactionalID", Reason: "must be set for a Leadership that is not a Curator or Role of this package"}
	}
	for k, v := range cfg.KafkaConfig {
		base[k] = v
	}
	if _, ok := base["bootstrap.servers"]; !ok {
		return nil, &ConfigError{Field: `FencedConfig.KafkaConfig["bootstrap.servers"]`, Reason: "must be set for a Leadership that is not a Curator or Role of this package"}
	}
	setDefault(base, "client.id", "goneli-fenced-"+Sanitise(f.name))
	setDefault(base, "enable.metrics.push", false)
	setDefault(base, "reconnect.backoff.max.ms", 1000)
	base["transactional.id"] = f.txid
	// A commit's own error says whether every record got through; per-record reports would only
	// have to be drained.
	base["go.delivery.reports"] = false
	base["go.events.channel.size"] = 1000
	// A fenced producer's librdkafka logs its fence as fatal on stderr; the error reaches the
	// caller, and the log goes to the Scribe.
	base["go.logs.channel.enable"] = true
	f.conf = base
	if hooks != nil {
		f.detach = hooks.add(f.acquired)
	}
	return f, nil
}

// fencedPrefix begins the transactional ids of FencedProducers: fencedPrefix + group, and "." +
// role for a role (docs/operations.md, ACLs: a prefixed Write grant on fencedPrefix + group covers
// every role).
const fencedPrefix = "goneli-fenced."

// TransactionalID is the transactional.id that this producer shares with the group's other
// contenders.
func (f *FencedProducer) TransactionalID() string { return f.txid }

// acquired is the hook that a Curator or Role calls with LeaderAcquired's token before its barrier:
// initialising here fences every earlier holder before this instance's IsLeader turns true.
func (f *FencedProducer) acquired(token int64) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	if !f.lock(ctx) {
		f.log.W()("goneli %s: fenced producer %s: a transaction still runs at acquisition; it initialises at the next write", f.name, f.txid)
		return
	}
	defer f.unlock()
	if f.closed {
		return
	}
	if err := f.ensure(ctx, token); err != nil {
		f.log.W()("goneli %s: fenced producer %s: initialising at acquisition: %v; retried at the next write", f.name, f.txid, err)
		return
	}
	if f.trace != nil && f.trace.Initialised != nil {
		f.trace.Initialised(token)
	}
}

func (f *FencedProducer) lock(ctx context.Context) bool {
	select {
	case f.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (f *FencedProducer) unlock() { <-f.sem }

// ensure makes p a producer initialised for token, replacing one of an earlier tenure: a fenced
// librdkafka producer cannot be used again, and a fresh initialisation is what fences the others.
func (f *FencedProducer) ensure(ctx context.Context, token int64) error {
	if f.p != nil && f.token == token {
		if f.fenced == nil {
			return nil
		}
		if errors.Is(f.fenced, ErrWriteFenced) {
			// A successor initialised: initialising again would fence it in turn.
			return f.fenced
		}
		// Fatal for another reason: a new producer of the same tenure fences nobody else.
	}
	f.release()
	p, err := kafka.NewProducer(&f.conf)
	if err != nil {
		return fmt.Errorf("goneli: creating the fenced producer: %w", err)
	}
	drain := make(chan struct{})
	logs := make(chan struct{})
	go func() {
		defer close(logs)
		for l := range p.Logs() {
			f.log.D()("goneli %s: fenced producer %s: librdkafka: %s", f.name, f.txid, l.Message)
		}
	}()
	go func() {
		defer close(drain)
		for ev := range p.Events() {
			if e, ok := ev.(kafka.Error); ok {
				f.log.D()("goneli %s: fenced producer %s: %v", f.name, f.txid, e)
			}
		}
		<-logs
	}()
	f.p, f.drain, f.token, f.fenced = p, drain, token, nil
	if err := p.InitTransactions(ctx); err != nil {
		f.release()
		if isFence(err) {
			// A later tenure initialised first: this one is over already.
			return &FencedWriteError{TransactionalID: f.txid, Token: token, Broker: true, Err: err}
		}
		if denied := transactionalAuthorizationError(f.principal, f.txid, f.group, err); denied != nil {
			return denied
		}
		return fmt.Errorf("goneli: InitTransactions of %s: %w", f.txid, err)
	}
	return nil
}

// release closes p, if any, bounded by the timeout; a close that overruns finishes in the
// background.
func (f *FencedProducer) release() error {
	p, drain := f.p, f.drain
	f.p, f.drain, f.token, f.fenced = nil, nil, 0, nil
	if p == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		p.Close()
		<-drain
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(f.timeout):
		return fmt.Errorf("goneli: the fenced producer %s did not close within %v: %w", f.txid, f.timeout, ErrCloseTimeout)
	}
}

// isFence reports whether err is the broker's refusal of a fenced producer.
func isFence(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke.Code() {
	case kafka.ErrFenced, kafka.ErrProducerFenced, kafka.ErrInvalidProducerEpoch:
		return true
	}
	return false
}

// FencedTx is a transaction in progress, given to the function passed to Transaction.
type FencedTx struct {
	f     *FencedProducer
	token int64
}

// Token is the fencing token of the tenure the transaction writes for; records may carry it so
// that readers can tell tenures apart.
func (tx *FencedTx) Token() int64 { return tx.token }

// Produce adds msg to the transaction. It does not wait for delivery: the commit does, and fails
// if any record of the transaction failed.
func (tx *FencedTx) Produce(msg *kafka.Message) error {
	return tx.f.p.Produce(msg, nil)
}

// Send writes msgs in one transaction: see Transaction.
func (f *FencedProducer) Send(ctx context.Context, msgs ...*kafka.Message) error {
	return f.Transaction(ctx, func(tx *FencedTx) error {
		for _, m := range msgs {
			if err := tx.Produce(m); err != nil {
				return err
			}
		}
		return nil
	})
}

// Transaction runs fn in a transaction of the current tenure and commits what it produced, unless
// fn fails, the tenure has ended by the time fn returns, or the broker has fenced the producer;
// then the transaction is aborted and its records are never visible to read_committed consumers.
// It returns fn's error, or a *FencedWriteError (errors.Is ErrWriteFenced) when this instance does
// not lead, its tenure ended, or a successor's producer initialised; other errors are Kafka's.
// ctx bounds the wait for earlier transactions and the initialisation and commit (each also by
// FencedConfig.Timeout); an abort is bounded by the timeout alone.
func (f *FencedProducer) Transaction(ctx context.Context, fn func(tx *FencedTx) error) error {
	if !f.lock(ctx) {
		return ctx.Err()
	}
	defer f.unlock()
	if f.closed {
		return ErrFencedProducerClosed
	}
	token := f.lead.Token()
	if token == 0 || !f.lead.IsLeader() {
		return &FencedWriteError{TransactionalID: f.txid, Token: token}
	}
	opCtx, cancel := f.opContext(ctx)
	err := f.ensure(opCtx, token)
	cancel()
	if err != nil {
		return err
	}
	if err := f.p.BeginTransaction(); err != nil {
		return f.failed(err)
	}
	if err := fn(&FencedTx{f: f, token: token}); err != nil {
		f.abort()
		return err
	}
	// The local check catches a tenure that ended while no successor has initialised yet; the
	// broker catches the rest, including a pause between this check and the commit.
	if f.lead.Token() != token {
		f.abort()
		return &FencedWriteError{TransactionalID: f.txid, Token: token}
	}
	opCtx, cancel = f.opContext(ctx)
	defer cancel()
	for {
		if f.trace != nil && f.trace.Committing != nil {
			f.trace.Committing(token)
		}
		err := f.p.CommitTransaction(opCtx)
		if err == nil {
			return nil
		}
		var ke kafka.Error
		if errors.As(err, &ke) && ke.IsRetriable() && opCtx.Err() == nil && f.lead.Token() == token {
			continue
		}
		return f.failed(err)
	}
}

func (f *FencedProducer) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.timeout)
}

// failed turns a failure of a transactional call into the error Transaction returns, aborting the
// transaction where librdkafka asks for it; a fenced or otherwise fatal producer is kept only to
// refuse the rest of its tenure, and replaced at the next one.
func (f *FencedProducer) failed(err error) error {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		f.abort()
		return err
	}
	if isFence(err) {
		werr := &FencedWriteError{TransactionalID: f.txid, Token: f.token, Broker: true, Err: err}
		f.fenced = werr
		return werr
	}
	if ke.IsFatal() {
		f.fenced = fmt.Errorf("goneli: the fenced producer %s failed: %w", f.txid, err)
		return f.fenced
	}
	f.abort()
	return err
}

// abort aborts the open transaction, bounded by the timeout. A failed abort leaves the transaction
// to the broker, which aborts it at the successor's initialisation or after transaction.timeout.ms.
func (f *FencedProducer) abort() {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	if err := f.p.AbortTransaction(ctx); err != nil {
		if isFence(err) {
			f.fenced = &FencedWriteError{TransactionalID: f.txid, Token: f.token, Broker: true, Err: err}
		}
		f.log.D()("goneli %s: fenced producer %s: abort: %v", f.name, f.txid, err)
	}
}

// Close releases the producer. A transaction in progress is waited for up to the timeout, then
// left to the broker to abort. Close is idempotent: later calls return the first call's result.
func (f *FencedProducer) Close() error {
	f.closeOnce.Do(func() {
		f.detach()
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		if !f.lock(ctx) {
			f.closeErr = fmt.Errorf("goneli: the fenced producer %s: a transaction still runs after %v: %w", f.txid, f.timeout, ErrCloseTimeout)
			return
		}
		defer f.unlock()
		f.closed = true
		f.closeErr = f.release()
	})
	return f.closeErr
}

// acquireHooks are called with the token of each LeaderAcquired of a role before its barrier.
type acquireHooks struct {
	mu    sync.Mutex
	next  int
	hooks map[int]func(token int64)
}

// add registers h and returns the function that removes it.
func (a *acquireHooks) add(h func(token int64)) func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hooks == nil {
		a.hooks = map[int]func(int64){}
	}
	id := a.next
	a.next++
	a.hooks[id] = h
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.hooks, id)
	}
}

// run calls every hook, in no particular order, outside the lock.
func (a *acquireHooks) run(token int64) {
	a.mu.Lock()
	hs := make([]func(int64), 0, len(a.hooks))
	for _, h := range a.hooks {
		hs = append(hs, h)
	}
	a.mu.Unlock()
	for _, h := range hs {
		h(token)
	}
}
