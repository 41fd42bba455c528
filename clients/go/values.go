package agentstate

import (
	"fmt"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// Append is a delta for a list channel: keep the first KeepFirst items (all when nil), then append Items.
type Append struct {
	Items     []any
	KeepFirst *uint64
	BaseRoot  []byte
}

// SetKeys is a delta for a map channel: set Set keys and remove Delete keys.
type SetKeys struct {
	Set      map[string]any
	Delete   []string
	BaseRoot []byte
}

// Keep takes the channel's value from the base checkpoint unchanged.
type Keep struct{}

// ToValue encodes a Go value as a Value (an Opaque becomes the opaque form).
func ToValue(v any) (*pb.Value, error) {
	if o, ok := v.(Opaque); ok {
		if _, err := opaquePayload(o); err != nil {
			return nil, err
		}
		return &pb.Value{Kind: &pb.Value_Opaque{Opaque: &pb.OpaqueValue{Type: o.Type, Data: o.Data}}}, nil
	}
	b, err := Encode(v)
	if err != nil {
		return nil, err
	}
	return &pb.Value{Kind: &pb.Value_Msgpack{Msgpack: b}}, nil
}

// FromValue decodes a Value message (any of its four forms).
func FromValue(v *pb.Value) (any, error) {
	switch k := v.GetKind().(type) {
	case *pb.Value_Msgpack:
		return Decode(k.Msgpack)
	case *pb.Value_Opaque:
		return Opaque{Type: k.Opaque.GetType(), Data: k.Opaque.GetData()}, nil
	case *pb.Value_List:
		out := make([]any, len(k.List.GetItems()))
		for i, item := range k.List.GetItems() {
			x, err := FromValue(item)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case *pb.Value_Map:
		return DecodeMap(k.Map.GetEntries())
	}
	return nil, nil
}

// DecodeMap decodes a map<string, Value> (metadata).
func DecodeMap(m map[string]*pb.Value) (map[string]any, error) {
	out := make(map[string]any, len(m))
	for k, v := range m {
		x, err := FromValue(v)
		if err != nil {
			return nil, fmt.Errorf("[%q]: %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

// CheckpointValues decodes the channel values of a checkpoint (channels without content are skipped).
func CheckpointValues(cp *pb.Checkpoint) (map[string]any, error) {
	out := map[string]any{}
	for name, cv := range cp.GetChannels() {
		if v := cv.GetValue(); v != nil {
			x, err := FromValue(v)
			if err != nil {
				return nil, fmt.Errorf("channel %q: %w", name, err)
			}
			out[name] = x
		}
	}
	return out, nil
}

func encodeField(v any, field string) (*pb.Value, error) {
	val, err := ToValue(v)
	if err != nil {
		return nil, invalidValue(field, err)
	}
	return val, nil
}

func encodeMap(m map[string]any, field string) (map[string]*pb.Value, error) {
	out := make(map[string]*pb.Value, len(m))
	for k, v := range m {
		val, err := encodeField(v, fmt.Sprintf("%s['%s']", field, k))
		if err != nil {
			return nil, err
		}
		out[k] = val
	}
	return out, nil
}

// ChannelWrite fills a ChannelWrite from a value, Append, SetKeys or Keep (errors name field).
func ChannelWrite(v any, field string) (*pb.ChannelWrite, error) {
	switch x := v.(type) {
	case Keep:
		return &pb.ChannelWrite{Op: &pb.ChannelWrite_Keep{Keep: true}}, nil
	case Append:
		d := &pb.ValueDelta{BaseRoot: x.BaseRoot, KeepFirst: x.KeepFirst}
		for i, item := range x.Items {
			val, err := ToValue(item)
			if err != nil {
				return nil, invalidValue(field, under(err, fmt.Sprintf(".append[%d]", i)))
			}
			d.Append = append(d.Append, val)
		}
		return &pb.ChannelWrite{Op: &pb.ChannelWrite_Delta{Delta: d}}, nil
	case SetKeys:
		d := &pb.ValueDelta{BaseRoot: x.BaseRoot, Delete: x.Delete, Set: map[string]*pb.Value{}}
		for k, item := range x.Set {
			val, err := ToValue(item)
			if err != nil {
				return nil, invalidValue(field, under(err, fmt.Sprintf(".set['%s']", k)))
			}
			d.Set[k] = val
		}
		return &pb.ChannelWrite{Op: &pb.ChannelWrite_Delta{Delta: d}}, nil
	case []Opaque:
		// A list of opaque items is sent item by item (one stored blob per element).
		items := make([]*pb.Value, len(x))
		for i, o := range x {
			val, err := ToValue(o)
			if err != nil {
				return nil, invalidValue(field, under(err, fmt.Sprintf("[%d]", i)))
			}
			items[i] = val
		}
		return &pb.ChannelWrite{Op: &pb.ChannelWrite_Value{Value: &pb.Value{Kind: &pb.Value_List{List: &pb.ListValue{Items: items}}}}}, nil
	}
	if list, ok := v.([]any); ok && len(list) > 0 {
		opaque := make([]Opaque, 0, len(list))
		for _, item := range list {
			if o, ok := item.(Opaque); ok {
				opaque = append(opaque, o)
			}
		}
		if len(opaque) == len(list) {
			return ChannelWrite(opaque, field)
		}
	}
	val, err := encodeField(v, field)
	if err != nil {
		return nil, err
	}
	return &pb.ChannelWrite{Op: &pb.ChannelWrite_Value{Value: val}}, nil
}
