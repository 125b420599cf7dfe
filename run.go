package goneli

import (
	"context"
	"errors"
	"sync"
	"time"
)

// LeaderFunc is leader work that runs for a whole tenure: Run calls it on a goroutine of its own
// when leadership is acquired (once the barrier, if any, has returned from LeaderAcquired, and only
// if the tenure still leads then), and cancels ctx the moment leadership is fenced or revoked, or
// Run's own context ends. It must return soon after ctx is cancelled: a revocation waits for it (so
// that no successor starts while it runs, for at most the rebalance timeout), and so does the next
// acquisition after a fence.
//
// A LeaderFunc that returns while its tenure lasts is not called again until leadership is next
// acquired; the instance keeps leading meanwhile.
type LeaderFunc func(ctx context.Context)

// RoleFunc is a LeaderFunc for one role of RunRoles, which role names.
type RoleFunc func(ctx context.Context, role string)

// Run contends for leadership of config's group until ctx ends, runs task for each tenure won, and
// then closes the instance, handing leadership over at once; it is New, a pulse loop and Close in
// one call, for programs whose leader work is one long-running function. Run does not return
// before every call of task has returned, so a task must heed its context. If ctx has already ended,
// Run returns nil without starting anything. Otherwise it returns nil once the
// instance has closed after ctx ended, New's error if the instance could not start, or a fatal
// error that stopped the pulse loop (the instance is closed then too).
//
// barrier, if given, sees every event too. It is called before task starts for LeaderAcquired,
// and after task has been told to stop (and, for LeaderRevoked, has returned) for LeaderFenced and
// LeaderRevoked. task is entered only for a tenure that still leads when the barrier returns from
// its LeaderAcquired: one fenced or revoked meanwhile (by a barrier slow to return) gets no call,
// and a call whose context was cancelled before it began is not entered.
//
// A program stopped by SIGTERM hands over gracefully if ctx ends with the signal:
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err := goneli.Run(ctx, config, func(ctx context.Context) { work(ctx) })
func Run(ctx context.Context, config Config, task LeaderFunc, barrier ...Barrier) error {
	var rf RoleFunc
	if task != nil {
		rf = func(ctx context.Context, _ string) { task(ctx) }
	}
	return runTenures(ctx, rf, barrier, func(b Barrier) (*neli, error) {
		n, err := New(config, b)
		if err != nil {
			return nil, err
		}
		return n.(*neli), nil
	})
}

// RunRoles is Run for NewRoles: task runs once per tenure of each role, each role on its own
// goroutine with its own context, so several roles' tasks run side by side.
func RunRoles(ctx context.Context, config Config, roles []string, task RoleFunc, barrier ...Barrier) error {
	return runTenures(ctx, task, barrier, func(b Barrier) (*neli, error) {
		r, err := NewRoles(config, roles, b)
		if err != nil {
			return nil, err
		}
		return r.(*roleSet).n, nil
	})
}

func runTenures(ctx context.Context, task RoleFunc, barrier []Barrier, start func(Barrier) (*neli, error)) error {
	if task == nil {
		return errors.New("goneli: Run and RunRoles need a non-nil task")
	}
	if ctx.Err() != nil {
		return nil
	}
	tr := newTenureRunner(ctx, task)
	var user Barrier
	if len(barrier) > 0 {
		user = barrier[0]
	}
	// The barrier needs the instance that start makes; no event comes before start returns, since
	// only a pulse delivers one, but it waits for the instance all the same.
	var inst *neli
	started := make(chan struct{})
	n, err := start(tr.barrier(user, func(role string) bool {
		<-started
		return inst != nil && inst.acquisitionStands(role)
	}))
	inst = n
	close(started)
	if err != nil {
		return err
	}
	pulseErr := serve(ctx, n)
	closeErr := n.Close()
	// Close returns once the final events were delivered, unless a barrier call made it; either
	// way no task may outlive Run.
	tr.stopAll()
	if pulseErr != nil {
		return errors.Join(pulseErr, closeErr)
	}
	return closeErr
}

// serve pulses n until ctx ends, the instance closes, or a fatal error. A leader's PulseCtx returns
// at once, so between its cycles serve waits for the next one to be due.
func serve(ctx context.Context, n *neli) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		leader, err := n.PulseCtx(ctx)
		switch {
		case errors.Is(err, context.Canceled) || errors.Is(err, ErrNonLivePulse) || ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		case !leader:
			continue
		}
		timer.Reset(n.cycleWait())
		select {
		case <-ctx.Done():
			return nil
		case <-n.life.closing:
			return nil
		case <-timer.C:
		}
	}
}

// tenureRunner starts and stops a LeaderFunc per role from the barrier's events. Each role's events
// come from one goroutine in order, but roles' goroutines differ, hence the lock.
type tenureRunner struct {
	ctx  context.Context
	task RoleFunc
	mu   sync.Mutex
	runs map[string]*taskRun
	// closed is set by stopAll: Close may return while a barrier call is under way, and an
	// acquisition delivered after that must not start a task that Run would not wait for.
	closed  bool
	running sync.WaitGroup // every call of task, whatever the map still holds
}

// taskRun is one call of the task.
type taskRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newTenureRunner(ctx context.Context, task RoleFunc) *tenureRunner {
	return &tenureRunner{ctx: ctx, task: task, runs: map[string]*taskRun{}}
}

// barrier is the barrier through which Run sees an instance's events: user's (if not nil) is
// called before the task starts for LeaderAcquired, and after it has been told to stop for the
// others. stands reports, from within the call for a LeaderAcquired of a role, whether that
// acquisition still stands: a barrier slow in LeaderAcquired may return after its tenure was
// fenced or revoked, and the task must not be entered for a tenure that is over.
func (tr *tenureRunner) barrier(user Barrier, stands func(role string) bool) Barrier {
	return func(e Event) {
		acquired, ok := e.(LeaderAcquired)
		if !ok {
			tr.handle(e)
			if user != nil {
				user(e)
			}
			return
		}
		if user != nil {
			user(e)
		}
		// Whatever ended the acquisition meanwhile is queued behind this call, and would cancel
		// the task the moment it started.
		if stands(acquired.Role) {
			tr.handle(e)
		}
	}
}

func (tr *tenureRunner) handle(e Event) {
	switch e := e.(type) {
	case LeaderAcquired:
		// A fence cancelled the previous call without waiting for it; two calls for one role must
		// never overlap.
		tr.stop(e.Role, true)
		tr.start(e.Role)
	case LeaderFenced:
		// The lease has already run out, so waiting here would protect nothing and would hold up
		// the role's next acquisition needlessly.
		tr.stop(e.Role, false)
	case LeaderRevoked:
		// The successor waits for this barrier call to return (see Barrier): wait for the task.
		tr.stop(e.Role, true)
	}
}

func (tr *tenureRunner) start(role string) {
	ctx, cancel := context.WithCancel(tr.ctx)
	run := &taskRun{cancel: cancel, done: make(chan struct{})}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closed {
		cancel()
		return
	}
	tr.runs[role] = run
	tr.running.Add(1)
	go func() {
		defer tr.running.Done()
		defer close(run.done)
		defer cancel()
		// The tenure may have ended, or Run's context, between the start and this goroutine's
		// turn to run: a cancelled call is not entered.
		if ctx.Err() == nil {
			tr.task(ctx, role)
		}
	}()
}

// stop cancels the role's call, if any, and if wait is set waits for it to return. The call stays
// in the map until it has returned, so that stopAll sees it meanwhile.
func (tr *tenureRunner) stop(role string, wait bool) {
	tr.mu.Lock()
	run := tr.runs[role]
	tr.mu.Unlock()
	if run == nil {
		return
	}
	run.cancel()
	if !wait {
		return
	}
	<-run.done
	tr.mu.Lock()
	if tr.runs[role] == run {
		delete(tr.runs, role)
	}
	tr.mu.Unlock()
}

// stopAll cancels every call, refuses new ones, and waits until every call has returned.
func (tr *tenureRunner) stopAll() {
	tr.mu.Lock()
	tr.closed = true
	for _, run := range tr.runs {
		run.cancel()
	}
	tr.mu.Unlock()
	tr.running.Wait()
}
