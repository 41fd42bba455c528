package agentstate

import (
	"context"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// Memory is the MemoryService stub with helpers for memory items (docs/memory.md), in the client's
// namespace: c.Memory.Put, Get, Delete, Search, ListNamespaces, History. Filters are expression maps
// ({"a.b": 1, "n": {"$gt": 2}, "$or": [...]}) or *pb.MemoryFilter trees; vectors are []float32.
type Memory struct {
	pb.MemoryServiceClient
	namespace string
}

// MemoryPutOptions are the optional fields of a put.
type MemoryPutOptions struct {
	Vectors      map[string][]float32
	VectorSpace  string
	MergeVectors bool
	TTLMinutes   *float64
	Origin       pb.MemoryOrigin
	Actor        string
	Etag         string
	MustNotExist bool
	Provenance   *pb.MemoryProvenance
	RequestID    string
	// Schema names a registered schema (c.Schemas) the value follows at SchemaVersion.
	Schema        string
	SchemaVersion uint32
}

// MemorySearchOptions are the optional fields of a search.
type MemorySearchOptions struct {
	Filter       any // map[string]any (an expression) or *pb.MemoryFilter
	Vector       []float32
	VectorSpace  string
	Fields       []string
	UnscoredOnly bool
	Order        pb.MemoryOrder
	Limit        uint32
	Offset       uint32
	NoRefresh    bool
	OmitValues   bool
	// ReadSchemaVersion: each hit's value migrated to that version of its schema (as Get; 0: as stored).
	ReadSchemaVersion uint32
}

// MemoryFilter is the MemoryFilter of an expression map (a *pb.MemoryFilter is returned as it is).
func MemoryFilter(f any) (*pb.MemoryFilter, error) {
	if m, ok := f.(*pb.MemoryFilter); ok {
		return m, nil
	}
	v, err := ToValue(f)
	if err != nil {
		return nil, err
	}
	return &pb.MemoryFilter{Kind: &pb.MemoryFilter_Expression{Expression: v}}, nil
}

// MemoryValue decodes an item's value (nil when the read omitted it).
func MemoryValue(item *pb.MemoryItem) (any, error) {
	if item == nil || item.Value == nil {
		return nil, nil
	}
	return FromValue(item.Value)
}

// Put creates or replaces an item.
func (m *Memory) Put(ctx context.Context, path []string, key string, value map[string]any, o *MemoryPutOptions) (*pb.PutMemoryItemResponse, error) {
	if o == nil {
		o = &MemoryPutOptions{}
	}
	v, err := ToValue(value)
	if err != nil {
		return nil, err
	}
	req := &pb.PutMemoryItemRequest{Namespace: m.namespace, Path: path, Key: key, Value: v, VectorSpace: o.VectorSpace,
		Origin: o.Origin, Actor: o.Actor, Etag: o.Etag, MustNotExist: o.MustNotExist, Provenance: o.Provenance,
		RequestId: o.RequestID, Schema: o.Schema, SchemaVersion: o.SchemaVersion}
	if len(o.Vectors) > 0 {
		req.Vectors = map[string]*pb.Vector{}
		for name, vec := range o.Vectors {
			req.Vectors[name] = &pb.Vector{Values: vec}
		}
	}
	if o.MergeVectors {
		req.VectorUpdate = pb.VectorUpdate_VECTOR_UPDATE_MERGE
	}
	if o.TTLMinutes != nil {
		req.Ttl = durationpb.New(msDuration(*o.TTLMinutes * 60_000))
	}
	return m.PutMemoryItem(ctx, req)
}

// Get returns the live item, or nil (ReadSchemaVersion(v): its value migrated to version v of its schema).
func (m *Memory) Get(ctx context.Context, path []string, key string, opts ...ReadOption) (*pb.MemoryItem, error) {
	resp, err := m.GetMemoryItem(ctx, &pb.GetMemoryItemRequest{Namespace: m.namespace, Path: path, Key: key, AllowMissing: true,
		ReadSchemaVersion: readVersion(opts)})
	if err != nil {
		return nil, err
	}
	return resp.Item, nil
}

// Delete deletes an item (a missing one is not an error); purge also deletes its history.
func (m *Memory) Delete(ctx context.Context, path []string, key string, purge bool) (*pb.DeleteMemoryItemResponse, error) {
	return m.DeleteMemoryItem(ctx, &pb.DeleteMemoryItemRequest{Namespace: m.namespace, Path: path, Key: key, Purge: purge,
		AllowMissing: true})
}

// Search returns the items under prefix that match (by score with a vector query).
func (m *Memory) Search(ctx context.Context, prefix []string, o *MemorySearchOptions) ([]*pb.ScoredMemoryItem, error) {
	if o == nil {
		o = &MemorySearchOptions{}
	}
	req := &pb.SearchMemoryItemsRequest{Namespace: m.namespace, PathPrefix: prefix, Order: o.Order, Limit: o.Limit,
		Offset: o.Offset, OmitValues: o.OmitValues, ReadSchemaVersion: o.ReadSchemaVersion}
	if o.NoRefresh {
		f := false
		req.RefreshTtl = &f
	}
	if o.Filter != nil {
		f, err := MemoryFilter(o.Filter)
		if err != nil {
			return nil, err
		}
		req.Filter = f
	}
	if o.Vector != nil {
		req.Vector = &pb.VectorQuery{Vector: &pb.Vector{Values: o.Vector}, Space: o.VectorSpace, Fields: o.Fields}
		if o.UnscoredOnly {
			req.Vector.Unscored = pb.Unscored_UNSCORED_ONLY
		}
	}
	resp, err := m.SearchMemoryItems(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Items, nil
}

// ListNamespaces returns every path holding live items that matches prefix and suffix ("*" matches
// any label), truncated to maxDepth when it is > 0, in label-by-label UTF-8 order.
func (m *Memory) ListNamespaces(ctx context.Context, prefix, suffix []string, maxDepth uint32) ([][]string, error) {
	req := &pb.ListMemoryNamespacesRequest{Namespace: m.namespace, Prefix: segments(prefix), Suffix: segments(suffix),
		PageSize: 1000}
	if maxDepth > 0 {
		req.MaxDepth = &maxDepth
	}
	var out [][]string
	for {
		resp, err := m.ListMemoryNamespaces(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, n := range resp.Namespaces {
			out = append(out, n.Path)
		}
		if resp.NextPageToken == "" {
			return out, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

// History returns an item's revisions, newest first (ReadSchemaVersion(v) with includeValues: each value
// migrated to version v of its schema).
func (m *Memory) History(ctx context.Context, path []string, key string, includeValues bool, opts ...ReadOption) ([]*pb.MemoryItemRevision, error) {
	req := &pb.GetMemoryItemHistoryRequest{Namespace: m.namespace, Path: path, Key: key, IncludeValues: includeValues,
		ReadSchemaVersion: readVersion(opts)}
	var out []*pb.MemoryItemRevision
	for {
		resp, err := m.GetMemoryItemHistory(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Revisions...)
		if resp.NextPageToken == "" {
			return out, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

func segments(pattern []string) []*pb.PathSegment {
	out := make([]*pb.PathSegment, len(pattern))
	for i, s := range pattern {
		if s == "*" {
			out[i] = &pb.PathSegment{Kind: &pb.PathSegment_Any{Any: true}}
		} else {
			out[i] = &pb.PathSegment{Kind: &pb.PathSegment_Label{Label: s}}
		}
	}
	return out
}

func msDuration(ms float64) time.Duration { return time.Duration(math.Round(ms)) * time.Millisecond }
