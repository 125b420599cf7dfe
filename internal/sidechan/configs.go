package sidechan

import (
	"context"
	"fmt"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeConfigs describes resources in librdkafka's form, options ignored (ctx bounds it). kgo
// sends each broker's resource to that broker and the others to any broker, all at once. Results
// are matched to resources by type and name, not by position: Apache Kafka answers the resources
// it authorizes first and the others after them (ConfigHelper.handleDescribeConfigsRequest). A
// resource the response leaves out gets an error of its own.
func (c *Client) DescribeConfigs(ctx context.Context, resources []kafka.ConfigResource, _ ...kafka.DescribeConfigsAdminOption) ([]kafka.ConfigResourceResult, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, r := range resources {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceName = r.Name
		switch r.Type {
		case kafka.ResourceBroker:
			if _, err := strconv.Atoi(r.Name); err != nil {
				return nil, fmt.Errorf("broker %q: not a broker id", r.Name)
			}
			rr.ResourceType = kmsg.ConfigResourceTypeBroker
		case kafka.ResourceTopic:
			rr.ResourceType = kmsg.ConfigResourceTypeTopic
		case kafka.ResourceGroup:
			rr.ResourceType = kmsg.ConfigResourceTypeGroupConfig
		default:
			return nil, fmt.Errorf("resource type %v is not one goneli describes", r.Type)
		}
		req.Resources = append(req.Resources, rr)
	}
	resp, err := c.Request(ctx, req)
	if err != nil {
		return nil, asKafkaError(err)
	}
	type key struct {
		t    kmsg.ConfigResourceType
		name string
	}
	answered := map[key]kmsg.DescribeConfigsResponseResource{}
	for _, rr := range resp.(*kmsg.DescribeConfigsResponse).Resources {
		answered[key{rr.ResourceType, rr.ResourceName}] = rr
	}
	out := make([]kafka.ConfigResourceResult, len(resources))
	for i, r := range resources {
		res := kafka.ConfigResourceResult{Type: r.Type, Name: r.Name, Config: map[string]kafka.ConfigEntryResult{},
			Error: kafka.NewError(kafka.ErrNoError, "", false)}
		rr, ok := answered[key{req.Resources[i].ResourceType, r.Name}]
		switch {
		case !ok:
			res.Error = kafka.NewError(kafka.ErrUnknown, "the broker's answer leaves this resource out", false)
		case rr.ErrorCode != 0:
			res.Error = KafkaError(rr.ErrorCode, rr.ErrorMessage)
		}
		for _, c := range rr.Configs {
			v := ""
			if c.Value != nil {
				v = *c.Value
			}
			res.Config[c.Name] = kafka.ConfigEntryResult{Name: c.Name, Value: v, Source: kafka.ConfigSource(c.Source),
				IsReadOnly: c.ReadOnly, IsSensitive: c.IsSensitive}
		}
		out[i] = res
	}
	return out, nil
}
