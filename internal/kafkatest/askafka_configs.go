package kafkatest

import (
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeConfigs answers DescribeConfigs as Kafka's ConfigHelper.handleDescribeConfigsRequest
// does (core/src/main/scala/kafka/server/ConfigHelper.scala):
//   - the authorized resources first, in request order, then the refused ones; kfake answers in
//     request order;
//   - a GROUP resource (Kafka 4.0) describes every group setting, one the group does not override
//     with the answering broker's own value for it and source DEFAULT_CONFIG
//     (createGroupConfigEntry, with GroupConfig built from that broker's group coordinator
//     settings); kfake gives such a setting no value;
//   - on 3.9 there is no GROUP resource type: its id maps to UNKNOWN, whose authorization check
//     throws InvalidRequestException before any resource is described, and KafkaApis answers
//     the whole request with that error for every resource (DescribeConfigsRequest.getErrorResponse).
//
// Kafka also checks DESCRIBE_CONFIGS on a GROUP resource; kfake checks none there
// (32_describe_configs.go, ConfigResourceTypeGroupConfig) and offers no way to ask whether a
// principal may, so GroupConfigsDeniedTo names who may not.
func (k *Kafka) describeConfigs(x *exchange, node int32) ([]byte, bool) {
	req, ok := x.request().(*kmsg.DescribeConfigsRequest)
	if !ok {
		raw, err := x.forwardRaw()
		return raw, err == nil
	}
	if k.cfg.version == Kafka39 && slices.ContainsFunc(req.Resources, func(r kmsg.DescribeConfigsRequestResource) bool {
		return r.ResourceType == kmsg.ConfigResourceTypeGroupConfig
	}) {
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		msg := kerr.InvalidRequest.Description
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode, rr.ErrorMessage = r.ResourceType, r.ResourceName, kerr.InvalidRequest.Code, &msg
			resp.Resources = append(resp.Resources, rr)
		}
		return x.answer(resp), true
	}
	return x.patched(func(_ kmsg.Request, resp kmsg.Response) bool {
		r := resp.(*kmsg.DescribeConfigsResponse)
		changed := k.denyGroupConfigs(x, r)
		changed = k.groupDefaults(x, node, req, r) || changed
		changed = k.brokerDefaults(req, r) || changed
		refused := func(rr kmsg.DescribeConfigsResponseResource) bool {
			switch rr.ErrorCode {
			case kerr.ClusterAuthorizationFailed.Code, kerr.TopicAuthorizationFailed.Code, kerr.GroupAuthorizationFailed.Code:
				return true
			}
			return false
		}
		ordered := make([]kmsg.DescribeConfigsResponseResource, 0, len(r.Resources))
		for _, rr := range r.Resources {
			if !refused(rr) {
				ordered = append(ordered, rr)
			}
		}
		for _, rr := range r.Resources {
			if refused(rr) {
				ordered = append(ordered, rr)
			}
		}
		for i := range ordered {
			if ordered[i].ResourceType != r.Resources[i].ResourceType || ordered[i].ResourceName != r.Resources[i].ResourceName {
				changed = true
			}
		}
		r.Resources = ordered
		return changed
	})
}

// groupDefaults fills the value of each group setting that kfake describes without one from the
// answering broker's "group."-prefixed setting, which it asks kfake for on this connection. A
// principal that may not describe the broker's configs leaves them without a value.
func (k *Kafka) groupDefaults(x *exchange, node int32, req *kmsg.DescribeConfigsRequest, r *kmsg.DescribeConfigsResponse) bool {
	var missing []string
	for _, rr := range r.Resources {
		if rr.ResourceType != kmsg.ConfigResourceTypeGroupConfig || rr.ErrorCode != 0 {
			continue
		}
		for _, c := range rr.Configs {
			if c.Value == nil && c.Source == kmsg.ConfigSourceDefaultConfig && !slices.Contains(missing, "group."+c.Name) {
				missing = append(missing, "group."+c.Name)
			}
		}
	}
	if len(missing) == 0 || node < 0 {
		return false
	}
	ask := kmsg.NewPtrDescribeConfigsRequest()
	ask.Version = 1
	br := kmsg.NewDescribeConfigsRequestResource()
	br.ResourceType, br.ResourceName, br.ConfigNames = kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(node)), missing
	ask.Resources = append(ask.Resources, br)
	resp, err := x.c.ask(ask)
	if err != nil {
		return false
	}
	broker := map[string]*string{}
	for _, rr := range resp.(*kmsg.DescribeConfigsResponse).Resources {
		if rr.ErrorCode == 0 {
			for _, c := range rr.Configs {
				broker[c.Name] = c.Value
			}
		}
	}
	changed := false
	for i := range r.Resources {
		rr := &r.Resources[i]
		if rr.ResourceType != kmsg.ConfigResourceTypeGroupConfig || rr.ErrorCode != 0 {
			continue
		}
		for j := range rr.Configs {
			c := &rr.Configs[j]
			v := broker["group."+c.Name]
			if c.Value != nil || c.Source != kmsg.ConfigSourceDefaultConfig || v == nil {
				continue
			}
			c.Value, changed = v, true
			if req.IncludeSynonyms {
				syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
				syn.Name, syn.Value, syn.Source = c.Name, v, kmsg.ConfigSourceDefaultConfig
				c.ConfigSynonyms = append([]kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{syn}, c.ConfigSynonyms...)
			}
		}
	}
	return changed
}

// DenyGroupConfigs refuses DESCRIBE_CONFIGS on every GROUP resource to the SASL users named
// ("ANONYMOUS" for a connection without SASL) from now on, in place of those GroupConfigsDeniedTo or
// an earlier call named; with none, to nobody. It stands in for an ACL removed, or granted, while a
// test runs.
func (k *Kafka) DenyGroupConfigs(users ...string) {
	denied := map[string]bool{}
	for _, u := range users {
		denied[u] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cfg.groupConfigsDenied = denied
}

// groupConfigsDenied reports whether user may not describe GROUP resources.
func (k *Kafka) groupConfigsDenied(user string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cfg.groupConfigsDenied[user]
}

// denyGroupConfigs refuses the GROUP resources to a user that GroupConfigsDeniedTo names, as
// ConfigHelper does without DESCRIBE_CONFIGS on the group: GROUP_AUTHORIZATION_FAILED, no configs.
func (k *Kafka) denyGroupConfigs(x *exchange, r *kmsg.DescribeConfigsResponse) bool {
	user := x.c.user
	if user == "" {
		user = "ANONYMOUS"
	}
	if !k.groupConfigsDenied(user) {
		return false
	}
	changed := false
	for i := range r.Resources {
		rr := &r.Resources[i]
		if rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig {
			msg := kerr.GroupAuthorizationFailed.Description
			rr.ErrorCode, rr.ErrorMessage, rr.Configs, changed = kerr.GroupAuthorizationFailed.Code, &msg, nil, true
		}
	}
	return changed
}

// brokerDefaults describes two broker settings as Kafka does where kfake does not: the default
// group.max.session.timeout.ms, 30 min (kfake's is 5 min; AsKafka enforces Kafka's), and
// group.coordinator.rebalance.protocols, which kfake does not list, as ConsumerProtocol has it: by
// default "classic" in 3.9, "classic,consumer" from 4.0
// (GroupCoordinatorConfig.GROUP_COORDINATOR_REBALANCE_PROTOCOLS_DEFAULT).
// The doctor reads the latter to tell whether the brokers serve KIP-848.
func (k *Kafka) brokerDefaults(req *kmsg.DescribeConfigsRequest, r *kmsg.DescribeConfigsResponse) bool {
	const maxSession, protocols = "group.max.session.timeout.ms", "group.coordinator.rebalance.protocols"
	changed := false
	for i := range r.Resources {
		rr := &r.Resources[i]
		if rr.ResourceType != kmsg.ConfigResourceTypeBroker || rr.ErrorCode != 0 {
			continue
		}
		var names []string
		for _, q := range req.Resources {
			if q.ResourceType == rr.ResourceType && q.ResourceName == rr.ResourceName {
				names = q.ConfigNames
			}
		}
		listed := false
		for j := range rr.Configs {
			c := &rr.Configs[j]
			switch c.Name {
			case maxSession:
				if c.Source == kmsg.ConfigSourceDefaultConfig {
					c.Value, changed = kmsg.StringPtr(strconv.Itoa(int(groupMaxSession.Milliseconds()))), true
				}
			case protocols:
				listed = true
			}
		}
		if !listed && (names == nil || slices.Contains(names, protocols)) {
			value := "classic"
			if k.cfg.consumerProtocolOn() {
				value = "classic,consumer"
			}
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			c.Name, c.Value, c.Source, c.IsDefault, c.ConfigType = protocols, &value, kmsg.ConfigSourceDefaultConfig, true, kmsg.ConfigTypeList
			rr.Configs = append(rr.Configs, c)
			changed = true
		}
	}
	return changed
}
