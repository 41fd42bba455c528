package agentstate

// Typed helpers of the ConversationService (docs/conversations.md): items, appends, the latest items,
// pop, GetContext, and the context and compaction hashes a client can recompute from what it got.

import (
	"context"

	"lukechampine.com/blake3"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// ItemOptions are the optional fields of an item.
type ItemOptions struct {
	Role, ClientItemID, CallID, ToolName, RunID, StepID string
	Tokens                                              *pb.TokenCount
	DedupeKey                                           []byte
	// Schema names a registered schema (c.Schemas) the content (a map) follows at SchemaVersion.
	Schema        string
	SchemaVersion uint32
}

// NewItem is an ItemInput with content encoded as every value of this client.
func NewItem(kind pb.ItemKind, content any, o *ItemOptions) (*pb.ItemInput, error) {
	v, err := ToValue(content)
	if err != nil {
		return nil, err
	}
	if o == nil {
		o = &ItemOptions{}
	}
	return &pb.ItemInput{Kind: kind, Content: v, Role: o.Role, ClientItemId: o.ClientItemID, CallId: o.CallID,
		ToolName: o.ToolName, RunId: o.RunID, StepId: o.StepID, Tokens: o.Tokens, DedupeKey: o.DedupeKey,
		Schema: o.Schema, SchemaVersion: o.SchemaVersion}, nil
}

// AppendOptions are the optional fields of AppendItems.
type AppendOptions struct {
	ExpectedLastSeq *uint64
	CreateThread    bool
	Reopen          bool
	RequestID       string
	// ReadSchemaVersion: each answered item's migration to that version of its schema (the answer has no
	// content: SchemaVersion, StoredSchemaVersion, Migration, MigrationError); a FAIL policy fails the call
	// and appends nothing. 0: as stored.
	ReadSchemaVersion uint32
}

// AppendItems appends items to a thread's log in one transaction.
func (c *Client) AppendItems(ctx context.Context, threadID string, items []*pb.ItemInput, o *AppendOptions) (*pb.AppendItemsResponse, error) {
	if o == nil {
		o = &AppendOptions{}
	}
	return c.Conversations.AppendItems(ctx, &pb.AppendItemsRequest{Namespace: c.Namespace, ThreadId: threadID,
		Items: items, ExpectedLastSeq: o.ExpectedLastSeq, CreateThread: o.CreateThread, Reopen: o.Reopen,
		RequestId: o.RequestID, ReadSchemaVersion: o.ReadSchemaVersion})
}

// LatestItems returns the newest n items (every item with 0), oldest first, reading every page
// (ReadSchemaVersion(v): each content migrated to version v of its schema).
func (c *Client) LatestItems(ctx context.Context, threadID string, n uint32, opts ...ReadOption) ([]*pb.ConversationItem, error) {
	var out []*pb.ConversationItem
	token := ""
	read := readVersion(opts)
	for {
		resp, err := c.Conversations.ListItems(ctx, &pb.ListItemsRequest{Namespace: c.Namespace, ThreadId: threadID,
			Latest: n, PageSize: 1000, PageToken: token, ReadSchemaVersion: read})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Items...)
		if token = resp.NextPageToken; token == "" {
			return out, nil
		}
	}
}

// GetItemsOptions are the optional fields of GetItems.
type GetItemsOptions struct {
	AllowMissing      bool
	OmitContent       bool
	ReadSchemaVersion uint32 // each content migrated to that version of its schema (0: as stored)
}

// GetItems returns the items named by seq and by client item id (ITEM_NOT_FOUND for a missing one unless
// AllowMissing: then the response lists it).
func (c *Client) GetItems(ctx context.Context, threadID string, seqs []uint64, clientItemIDs []string, o *GetItemsOptions) (*pb.GetItemsResponse, error) {
	if o == nil {
		o = &GetItemsOptions{}
	}
	return c.Conversations.GetItems(ctx, &pb.GetItemsRequest{Namespace: c.Namespace, ThreadId: threadID, Seqs: seqs,
		ClientItemIds: clientItemIDs, AllowMissing: o.AllowMissing, OmitContent: o.OmitContent,
		ReadSchemaVersion: o.ReadSchemaVersion})
}

// PopItem removes and returns the newest item (nil when the log is empty).
func (c *Client) PopItem(ctx context.Context, threadID string) (*pb.ConversationItem, error) {
	resp, err := c.Conversations.PopItem(ctx, &pb.PopItemRequest{Namespace: c.Namespace, ThreadId: threadID})
	if err != nil {
		return nil, err
	}
	return resp.Item, nil
}

// GetContext assembles the model input of a thread within budget tokens (ReadSchemaVersion(v): the log
// items' contents migrated to version v, as LatestItems does).
func (c *Client) GetContext(ctx context.Context, threadID string, budget uint32, knowledge []*pb.KnowledgeItem,
	opts ...ReadOption) (*pb.GetContextResponse, error) {
	return c.Conversations.GetContext(ctx, &pb.GetContextRequest{Namespace: c.Namespace, ThreadId: threadID,
		BudgetTokens: budget, Knowledge: knowledge, ReadSchemaVersion: readVersion(opts)})
}

func arrayHeader(n int) []byte {
	switch {
	case n < 16:
		return []byte{0x90 | byte(n)}
	case n < 0x10000:
		return []byte{0xdc, byte(n >> 8), byte(n)}
	default:
		return []byte{0xdd, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
}

func valueBytes(v *pb.Value) ([]byte, error) {
	if mp, ok := v.GetKind().(*pb.Value_Msgpack); ok {
		return mp.Msgpack, nil
	}
	x, err := FromValue(v)
	if err != nil {
		return nil, err
	}
	return Encode(x)
}

// ContextHash is the context hash of GetContext's items (docs/conversations.md "Step 8"); it equals
// the response's ContextHash.
func ContextHash(items []*pb.ContextItem) ([]byte, error) {
	buf := append([]byte("agentstate.v1 context\x00"), arrayHeader(len(items))...)
	for _, it := range items {
		buf = append(buf, arrayHeader(6)...)
		for _, f := range []any{int64(it.Source), int64(it.Kind), it.Role, it.CallId, it.ToolName} {
			b, err := Encode(f)
			if err != nil {
				return nil, err
			}
			buf = append(buf, b...)
		}
		b, err := valueBytes(it.Content)
		if err != nil {
			return nil, err
		}
		buf = append(buf, b...)
	}
	sum := blake3.Sum256(buf)
	return sum[:], nil
}

// CompactionHash is the content hash of a claimed compaction computed from its inputs; it equals
// the compaction's ContentHash while the range is unchanged.
func CompactionHash(comp *pb.Compaction) ([]byte, error) {
	body := []any{}
	if comp.Level == 1 {
		for _, it := range comp.Items {
			body = append(body, []any{it.Seq, it.ContentHash})
		}
	} else {
		for _, s := range comp.Summaries {
			body = append(body, []any{s.SummaryId, s.Text})
		}
	}
	b, err := Encode([]any{int64(comp.Level), comp.FirstSeq, comp.LastSeq, body})
	if err != nil {
		return nil, err
	}
	sum := blake3.Sum256(append([]byte("agentstate.v1 compaction\x00"), b...))
	return sum[:], nil
}
