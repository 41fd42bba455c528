package agentstate

// GetContext's memory query (docs/memory.md, docs/conversations.md): a MemoryQuery whose hits join the
// knowledge layer after the request's own knowledge items.

import (
	"context"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// MemoryQueryOptions are the optional fields of a MemoryQuery; they mean what they mean in a search.
// Limit 0 means 10 hits.
type MemoryQueryOptions struct {
	Filter      any // map[string]any (an expression) or *pb.MemoryFilter
	Vector      []float32
	VectorSpace string
	Fields      []string
	Order       pb.MemoryOrder
	Limit       uint32
}

// NewMemoryQuery is the MemoryQuery of a search under prefix, for GetContextWithMemory.
func NewMemoryQuery(prefix []string, o *MemoryQueryOptions) (*pb.MemoryQuery, error) {
	if o == nil {
		o = &MemoryQueryOptions{}
	}
	q := &pb.MemoryQuery{PathPrefix: prefix, Order: o.Order, Limit: o.Limit}
	if q.Limit == 0 {
		q.Limit = 10
	}
	if o.Filter != nil {
		f, err := MemoryFilter(o.Filter)
		if err != nil {
			return nil, err
		}
		q.Filter = f
	}
	if o.Vector != nil {
		q.Vector = &pb.VectorQuery{Vector: &pb.Vector{Values: o.Vector}, Space: o.VectorSpace, Fields: o.Fields}
	}
	return q, nil
}

// GetContextWithMemory is GetContext with a memory query (nil: none): its hits join the knowledge layer after
// knowledge, each named by its context item's and explanation entry's MemoryHit.
func (c *Client) GetContextWithMemory(ctx context.Context, threadID string, budget uint32, knowledge []*pb.KnowledgeItem,
	query *pb.MemoryQuery, opts ...ReadOption) (*pb.GetContextResponse, error) {
	return c.Conversations.GetContext(ctx, &pb.GetContextRequest{Namespace: c.Namespace, ThreadId: threadID,
		BudgetTokens: budget, Knowledge: knowledge, MemoryQuery: query, ReadSchemaVersion: readVersion(opts)})
}
