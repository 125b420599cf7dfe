package driver

import (
	"errors"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/goneli/goneli/internal/core"
)

// AwaitDelivery waits until dl has been delivered, limit has passed, or abort is closed, and
// reports whether it was delivered. A nil dl counts as delivered.
func AwaitDelivery(dl *core.Delivery, limit time.Duration, abort <-chan struct{}) bool {
	if dl == nil {
		return true
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-dl.Wait():
		return true
	case <-t.C:
	case <-abort:
	}
	return false
}

// AwaitDeliveries is AwaitDelivery for several deliveries under one limit, measured on the clock
// that now reads.
func AwaitDeliveries(dls []*core.Delivery, limit time.Duration, abort <-chan struct{}, now func() time.Duration) bool {
	deadline := now() + limit
	for _, dl := range dls {
		if !AwaitDelivery(dl, deadline-now(), abort) {
			return false
		}
	}
	return true
}

// IsCode reports whether err is, or wraps, the Kafka error code.
func IsCode(err error, code kafka.ErrorCode) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.Code() == code
}
