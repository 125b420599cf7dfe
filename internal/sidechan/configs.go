package sidechan

import (
	"context"
	"fmt"
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeConfigs describes resources in librdkafka's form, options ignored (ctx bounds it). kgo
// sends each broker's resource to that broker and the others to any broker, all at once; a group's
// resource asked for alone goes to the broker that last described the group, if one did
// (groupResource). Results are matched to resources by type and name, not by position: Apache Kafka
// answers the resources it authorizes first and the others after them
// (ConfigHelper.handleDescribeConfigsRequest). A resource the response leaves out gets an error of
// its own.
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
	resp, err := c.groupResource(ctx, resources, req)
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

// BrokerIDs lists the ids of the cluster's brokers, from a metadata request that names no topic.
func (c *Client) BrokerIDs(ctx context.Context) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := c.Request(ctx, req)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
		ids = append(ids, b.NodeID)
	}
	return ids, nil
}

// groupResource sends req, which names resources, where it belongs. A group's resource asked for
// alone goes to the group's coordinator, the broker that last described the group: the answer is
// the group's own settings or, where it sets none, that broker's defaults, which are what it
// applies to the group; and that broker has just answered, where any other one kgo might pick for
// "any broker" may be cut off (a zone outage), which would hold the request until it times out.
// Should the coordinator not answer, the request goes to any broker after all.
//
// The request is bounded by ctx even while its answer is awaited (bounded): a broker asked for its
// own resource may have gone silent.
func (c *Client) groupResource(ctx context.Context, resources []kafka.ConfigResource, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	return c.bounded(ctx, func() (kmsg.Response, error) {
		if len(resources) == 1 && resources[0].Type == kafka.ResourceGroup {
			if node, ok := c.coordinatorOf(resources[0].Name); ok {
				if err := c.Fallback(); err != nil {
					return nil, err
				}
				resp, err := c.cl.Broker(int(node)).Request(ctx, req)
				if err == nil || ctx.Err() != nil {
					return resp, err
				}
			}
		}
		return c.Request(ctx, req)
	})
}
