package goneli

// delivery is the barrier's call with a tenure's event: done once the barrier has returned from it.
// The machine makes it with the events it posts (effects.deliver), the dispatcher finishes it.
type delivery struct {
	done chan struct{}
}

// newDelivery makes a delivery not finished yet.
func newDelivery() *delivery {
	return &delivery{done: make(chan struct{})}
}

// delivered reports whether the call has returned.
func (dl *delivery) delivered() bool {
	select {
	case <-dl.done:
		return true
	default:
		return false
	}
}

// wait is closed once the call has returned.
func (dl *delivery) wait() <-chan struct{} {
	return dl.done
}

// finish says that the call has returned.
func (dl *delivery) finish() {
	close(dl.done)
}
