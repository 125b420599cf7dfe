package kafkatest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumerBounds are the brokers' bounds on a KIP-848 group's own session and heartbeat interval
// (group.consumer.min/max.session.timeout.ms and group.consumer.min/max.heartbeat.interval.ms).
type consumerBounds struct {
	minSession, maxSession, minInterval, maxInterval time.Duration
}

// ConsumerGroupBounds sets the brokers' bounds on the KIP-848 session and heartbeat interval that a
// group may set for itself (group.consumer.min/max.session.timeout.ms and
// group.consumer.min/max.heartbeat.interval.ms). By default they are Kafka's, 45 s to 60 s and 5 s
// to 15 s, widened to take in the broker's own group.consumer.session.timeout.ms and
// group.consumer.heartbeat.interval.ms, which Kafka refuses to start outside them
// (GroupCoordinatorConfig's constructor).
func ConsumerGroupBounds(minSession, maxSession, minInterval, maxInterval time.Duration) KafkaOpt {
	return func(c *kafkaConfig) {
		c.bounds = &consumerBounds{minSession, maxSession, minInterval, maxInterval}
	}
}

// alterConfigs refuses, as Kafka 4.0 does, to give a group a KIP-848 session or heartbeat interval
// outside the brokers' bounds, or a session no longer than its interval: the controller validates a
// GROUP resource's resulting settings, over the broker's group.consumer.* defaults, with
// GroupConfigManager.validate and GroupConfig.validateValues (core/.../ControllerConfigurationValidator.scala,
// group-coordinator/.../GroupConfig.java) and answers INVALID_CONFIG for the resource. kfake
// accepts any value. Kafka 3.9 knows no GROUP resource: its ConfigResource.Type.forId makes the id
// UNKNOWN, which it refuses with INVALID_REQUEST. Other resources go to kfake as they came.
func (k *Kafka) alterConfigs(x *exchange) ([]byte, bool) {
	req, ok := x.request().(*kmsg.IncrementalAlterConfigsRequest)
	if !ok {
		raw, err := x.forwardRaw()
		return raw, err == nil
	}
	refusals := map[int]kmsg.IncrementalAlterConfigsResponseResource{}
	for i, rr := range req.Resources {
		if rr.ResourceType != kmsg.ConfigResourceTypeGroupConfig {
			continue
		}
		var code int16
		var msg string
		if k.cfg.version == Kafka39 {
			code, msg = kerr.InvalidRequest.Code, fmt.Sprintf("Unknown resource type %d", rr.ResourceType)
		} else if err := k.checkGroupConfigs(x, rr); err != "" {
			code, msg = kerr.InvalidConfig.Code, err
		}
		if code != 0 {
			res := kmsg.NewIncrementalAlterConfigsResponseResource()
			res.ResourceType, res.ResourceName, res.ErrorCode, res.ErrorMessage = rr.ResourceType, rr.ResourceName, code, &msg
			refusals[i] = res
		}
	}
	if len(refusals) == 0 {
		raw, err := x.forwardRaw()
		return raw, err == nil
	}
	rest := *req
	rest.Resources = nil
	for i, rr := range req.Resources {
		if _, refused := refusals[i]; !refused {
			rest.Resources = append(rest.Resources, rr)
		}
	}
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	var answered []kmsg.IncrementalAlterConfigsResponseResource
	if len(rest.Resources) > 0 {
		r, err := x.c.ask(&rest)
		if err != nil {
			return nil, false
		}
		answered = r.(*kmsg.IncrementalAlterConfigsResponse).Resources
	}
	// Kafka answers the resources in the order they came.
	for i := range req.Resources {
		if res, refused := refusals[i]; refused {
			resp.Resources = append(resp.Resources, res)
			continue
		}
		if len(answered) > 0 {
			resp.Resources = append(resp.Resources, answered[0])
			answered = answered[1:]
		}
	}
	return x.answer(resp), true
}

// checkGroupConfigs returns why Kafka would refuse the group's settings after rr's changes, or "".
// The group's current settings and the broker's defaults are asked of kfake on the connection.
func (k *Kafka) checkGroupConfigs(x *exchange, rr kmsg.IncrementalAlterConfigsRequestResource) string {
	const sessionKey, intervalKey = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
	values := map[string]*string{}
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Version = 1
	br := kmsg.NewDescribeConfigsRequestResource()
	br.ResourceType, br.ResourceName = kmsg.ConfigResourceTypeBroker, ""
	br.ConfigNames = []string{"group." + sessionKey, "group." + intervalKey}
	gr := kmsg.NewDescribeConfigsRequestResource()
	gr.ResourceType, gr.ResourceName, gr.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, rr.ResourceName, []string{sessionKey, intervalKey}
	dc.Resources = append(dc.Resources, br, gr)
	if resp, err := x.c.ask(dc); err == nil {
		for _, res := range resp.(*kmsg.DescribeConfigsResponse).Resources {
			if res.ErrorCode != 0 {
				continue
			}
			for _, c := range res.Configs {
				switch {
				case res.ResourceType == kmsg.ConfigResourceTypeBroker:
					values[c.Name[len("group."):]] = c.Value
				case c.Source == kmsg.ConfigSourceGroupConfig:
					values[c.Name] = c.Value
				}
			}
		}
	}
	b := k.boundsFor(values[sessionKey], values[intervalKey])
	for _, c := range rr.Configs {
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			values[c.Name] = c.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(values, c.Name)
		}
	}
	session, sok := millis(values[sessionKey])
	interval, iok := millis(values[intervalKey])
	switch {
	case iok && interval < b.minInterval:
		return intervalKey + " must be greater than or equal to group.consumer.min.heartbeat.interval.ms"
	case iok && interval > b.maxInterval:
		return intervalKey + " must be less than or equal to group.consumer.max.heartbeat.interval.ms"
	case sok && session < b.minSession:
		return sessionKey + " must be greater than or equal to group.consumer.min.session.timeout.ms"
	case sok && session > b.maxSession:
		return sessionKey + " must be less than or equal to group.consumer.max.session.timeout.ms"
	case sok && iok && session <= interval:
		return sessionKey + " must be greater than " + intervalKey
	}
	return ""
}

// boundsFor is the configured bounds, or Kafka's defaults widened to take in the broker's session
// and interval.
func (k *Kafka) boundsFor(session, interval *string) consumerBounds {
	if k.cfg.bounds != nil {
		return *k.cfg.bounds
	}
	// GroupCoordinatorConfig's CONSUMER_GROUP_{MIN,MAX}_{SESSION_TIMEOUT,HEARTBEAT_INTERVAL}_MS_DEFAULT.
	b := consumerBounds{45 * time.Second, 60 * time.Second, 5 * time.Second, 15 * time.Second}
	if s, ok := millis(session); ok {
		b.minSession, b.maxSession = min(b.minSession, s), max(b.maxSession, s)
	}
	if i, ok := millis(interval); ok {
		b.minInterval, b.maxInterval = min(b.minInterval, i), max(b.maxInterval, i)
	}
	return b
}

func millis(v *string) (time.Duration, bool) {
	if v == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(*v, 10, 32)
	return time.Duration(n) * time.Millisecond, err == nil
}
