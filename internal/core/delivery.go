package core

// delivery is the barrier's call with a tenure's event: done once the barrier has returned from it.
// The machine makes it with the events it posts (effects.deliver), the dispatcher finishes it.
type Delivery struct {
	done chan struct{}
}

// newDelivery makes a delivery not finished yet.
func NewDelivery() *Delivery {
	return &Delivery{done: make(chan struct{})}
}

// delivered reports whether the call has returned.
func (dl *Delivery) delivered() bool {
	select {
	case <-dl.done:
		return true
	default:
		return false
	}
}

// wait is closed once the call has returned.
func (dl *Delivery) Wait() <-chan struct{} {
	return dl.done
}

// finish says that the call has returned.
func (dl *Delivery) Finish() {
	close(dl.done)
}
