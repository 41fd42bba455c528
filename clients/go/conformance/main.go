// Command conformance is the Go runner of the cross-language scenario suite
// (clients/conformance/README.md): the same interpreter as clients/conformance/runner.py.
//
//	go run ./conformance --address ADDR --lang go --run RUN --dir DIR --mode write
//	go run ./conformance --address ADDR --lang go --run RUN --dir DIR --mode read --peers py,ts
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	agentstate "github.com/agentstate/sidecar/clients/go"
	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

type (
	obj  = map[string]any
	desc = map[string]any
)

var (
	confDir   string
	values    map[string]any
	encodings map[string]string
	scenarios []obj
	ctx       = context.Background()
)

func load() error {
	_, file, _, _ := runtime.Caller(0)
	confDir = filepath.Join(filepath.Dir(file), "..", "..", "conformance")
	var v struct{ Values map[string]any }
	var e struct{ Encodings map[string]string }
	if err := readJSON(filepath.Join(confDir, "values.json"), &v); err != nil {
		return err
	}
	if err := readJSON(filepath.Join(confDir, "encodings.json"), &e); err != nil {
		return err
	}
	values, encodings = v.Values, e.Encodings
	files, _ := filepath.Glob(filepath.Join(confDir, "scenarios", "*.json"))
	sort.Strings(files)
	for _, f := range files {
		var sc obj
		if err := readJSON(f, &sc); err != nil {
			return err
		}
		scenarios = append(scenarios, sc)
	}
	return nil
}

func readJSON(path string, out any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func resolve(d any) any {
	switch x := d.(type) {
	case map[string]any:
		if ref, ok := x["ref"].(string); ok && len(x) == 1 {
			return resolve(values[ref])
		}
		if _, ok := x["$all_values_map"]; ok && len(x) == 1 {
			m := obj{}
			for k, v := range values {
				m[k] = resolve(v)
			}
			return obj{"map": m}
		}
		out := obj{}
		for k, v := range x {
			out[k] = resolve(v)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = resolve(v)
		}
		return out
	}
	return d
}

// fromDesc is a language-neutral description as the Go value this client encodes.
func fromDesc(d any) (any, error) {
	m := d.(map[string]any)
	for tag, arg := range m {
		switch tag {
		case "nil":
			return nil, nil
		case "bool":
			return arg.(bool), nil
		case "int":
			n, ok := new(big.Int).SetString(arg.(string), 10)
			if !ok {
				return nil, fmt.Errorf("bad int %v", arg)
			}
			return n, nil
		case "float":
			s := arg.(string)
			switch s {
			case "nan":
				return math.NaN(), nil
			case "inf":
				return math.Inf(1), nil
			case "-inf":
				return math.Inf(-1), nil
			}
			return strconv.ParseFloat(s, 64)
		case "str":
			return arg.(string), nil
		case "bytes":
			return hex.DecodeString(arg.(string))
		case "list", "set":
			items := arg.([]any)
			out := make([]any, len(items))
			for i, x := range items {
				v, err := fromDesc(x)
				if err != nil {
					return nil, err
				}
				out[i] = v
			}
			if tag == "set" {
				return agentstate.Set(out), nil
			}
			return out, nil
		case "map":
			out := map[string]any{}
			for k, x := range arg.(map[string]any) {
				v, err := fromDesc(x)
				if err != nil {
					return nil, err
				}
				out[k] = v
			}
			return out, nil
		case "datetime":
			return agentstate.ParseDateTime(arg.(string))
		case "uuid":
			return agentstate.ParseUUID(arg.(string))
		case "decimal":
			return agentstate.NewDecimal(arg.(string))
		case "opaque":
			o := arg.(map[string]any)
			data, err := hex.DecodeString(o["data"].(string))
			return agentstate.Opaque{Type: o["type"].(string), Data: data}, err
		}
		return nil, fmt.Errorf("unknown value tag %s", tag)
	}
	return nil, fmt.Errorf("empty description")
}

func mustDesc(d any) any {
	v, err := fromDesc(resolve(d))
	if err != nil {
		panic(err)
	}
	return v
}

func rawBytes(spec string) []byte {
	if spec == "$deep65" {
		return append([]byte(strings.Repeat("\x91", 65)), 1)
	}
	b, err := hex.DecodeString(spec)
	if err != nil {
		panic(err)
	}
	return b
}

// valueBytes is the canonical bytes this language makes of a Value read from the server.
func valueBytes(v *pb.Value) string {
	x, err := agentstate.FromValue(v)
	if err != nil {
		return "decode error: " + err.Error()
	}
	b, err := agentstate.Encode(x)
	if err != nil {
		return "encode error: " + err.Error()
	}
	return hex.EncodeToString(b)
}

func kindName(v *pb.Value) string {
	switch v.GetKind().(type) {
	case *pb.Value_Msgpack:
		return "msgpack"
	case *pb.Value_Opaque:
		return "opaque"
	case *pb.Value_List:
		return "list"
	case *pb.Value_Map:
		return "map"
	}
	return "None"
}

type runner struct {
	address, lang, run string
	passed, failed     int
	saved              map[string]string
	records            map[string]any
}

func (r *runner) check(ok bool, format string, args ...any) {
	if ok {
		r.passed++
		return
	}
	r.failed++
	fmt.Printf("FAIL [%s] %s\n", r.lang, fmt.Sprintf(format, args...))
}

func thread(name any) string {
	s, _ := name.(string)
	return strings.TrimPrefix(s, "=")
}

func str(step obj, key string) string { s, _ := step[key].(string); return s }

func num(step obj, key string) (int, bool) {
	f, ok := step[key].(float64)
	return int(f), ok
}

func (r *runner) valueOf(d any) *pb.Value {
	m := d.(map[string]any)
	if raw, ok := m["raw"].(string); ok {
		return &pb.Value{Kind: &pb.Value_Msgpack{Msgpack: rawBytes(raw)}}
	}
	v, err := agentstate.ToValue(mustDesc(d))
	if err != nil {
		panic(err)
	}
	return v
}

func (r *runner) valueMap(m any) map[string]*pb.Value {
	out := map[string]*pb.Value{}
	mm, _ := m.(map[string]any)
	for k, d := range mm {
		out[k] = r.valueOf(d)
	}
	return out
}

func descMap(m any) map[string]any {
	out := map[string]any{}
	mm, _ := m.(map[string]any)
	for k, d := range mm {
		out[k] = mustDesc(d)
	}
	return out
}

func expandChannels(ch obj) obj {
	if _, ok := ch["$each_value"]; ok {
		out := obj{}
		for k, v := range values {
			out[k] = obj{"value": resolve(v)}
		}
		return out
	}
	return ch
}

func expandExpected(ch obj) obj {
	out := obj{}
	if _, ok := ch["$each_value"]; ok {
		for k, v := range values {
			out[k] = resolve(v)
		}
		return out
	}
	for k, v := range ch {
		out[k] = resolve(v)
	}
	return out
}

func (r *runner) writeOf(spec obj) any {
	if v, ok := spec["value"]; ok {
		return mustDesc(v)
	}
	if items, ok := spec["append"].([]any); ok {
		a := agentstate.Append{Items: []any{}}
		for _, x := range items {
			a.Items = append(a.Items, mustDesc(x))
		}
		if n, ok := num(spec, "keep_first"); ok {
			k := uint64(n)
			a.KeepFirst = &k
		}
		if br := str(spec, "base_root"); br != "" {
			a.BaseRoot, _ = hex.DecodeString(br)
		}
		return a
	}
	if _, ok := spec["set"]; ok {
		s := agentstate.SetKeys{Set: descMap(spec["set"])}
		for _, k := range asList(spec["delete"]) {
			s.Delete = append(s.Delete, k.(string))
		}
		return s
	}
	if _, ok := spec["delete"]; ok {
		s := agentstate.SetKeys{}
		for _, k := range asList(spec["delete"]) {
			s.Delete = append(s.Delete, k.(string))
		}
		return s
	}
	if spec["keep"] == true {
		return agentstate.Keep{}
	}
	panic(fmt.Sprintf("unknown channel write %v", spec))
}

func asList(v any) []any { l, _ := v.([]any); return l }

// memoryPaths is the result of a memory_list step.
type memoryPaths [][]string

func strs(v any) []string {
	out := []string{}
	for _, x := range asList(v) {
		out = append(out, x.(string))
	}
	return out
}

func floats(v any) []float32 {
	var out []float32
	for _, x := range asList(v) {
		out = append(out, float32(x.(float64)))
	}
	return out
}

var memoryOrders = map[string]pb.MemoryOrder{"updated": pb.MemoryOrder_MEMORY_ORDER_UPDATED_DESC,
	"insertion": pb.MemoryOrder_MEMORY_ORDER_INSERTION, "path_key": pb.MemoryOrder_MEMORY_ORDER_PATH_KEY}

var filterOperators = map[string]pb.FilterOperator{"eq": pb.FilterOperator_FILTER_OPERATOR_EQ,
	"ne": pb.FilterOperator_FILTER_OPERATOR_NE, "gt": pb.FilterOperator_FILTER_OPERATOR_GT,
	"gte": pb.FilterOperator_FILTER_OPERATOR_GTE, "lt": pb.FilterOperator_FILTER_OPERATOR_LT,
	"lte": pb.FilterOperator_FILTER_OPERATOR_LTE, "in": pb.FilterOperator_FILTER_OPERATOR_IN,
	"nin": pb.FilterOperator_FILTER_OPERATOR_NIN, "exists": pb.FilterOperator_FILTER_OPERATOR_EXISTS,
	"is_type": pb.FilterOperator_FILTER_OPERATOR_IS_TYPE, "length_eq": pb.FilterOperator_FILTER_OPERATOR_LENGTH_EQ}

var comparisonModes = map[string]pb.ComparisonMode{"agentstate": pb.ComparisonMode_COMPARISON_MODE_AGENTSTATE,
	"python": pb.ComparisonMode_COMPARISON_MODE_LANGGRAPH_PYTHON, "js": pb.ComparisonMode_COMPARISON_MODE_LANGGRAPH_JS}

// treeOf is a typed MemoryFilter tree from its scenario form (as runner.py's tree_of).
func treeOf(d obj) (*pb.MemoryFilter, error) {
	list := func(xs any) (*pb.MemoryFilterList, error) {
		out := &pb.MemoryFilterList{}
		for _, x := range asList(xs) {
			f, err := treeOf(x.(map[string]any))
			if err != nil {
				return nil, err
			}
			out.Filters = append(out.Filters, f)
		}
		return out, nil
	}
	if xs, ok := d["all"]; ok {
		l, err := list(xs)
		return &pb.MemoryFilter{Kind: &pb.MemoryFilter_All{All: l}}, err
	}
	if xs, ok := d["any"]; ok {
		l, err := list(xs)
		return &pb.MemoryFilter{Kind: &pb.MemoryFilter_Any{Any: l}}, err
	}
	if x, ok := d["not"]; ok {
		f, err := treeOf(x.(map[string]any))
		return &pb.MemoryFilter{Kind: &pb.MemoryFilter_Negate{Negate: f}}, err
	}
	mode := "agentstate"
	if m := str(d, "mode"); m != "" {
		mode = m
	}
	cond := &pb.FieldCondition{Op: filterOperators[str(d, "op")], Mode: comparisonModes[mode], Path: &pb.FieldPath{}}
	for _, seg := range asList(d["path"]) {
		if k, ok := seg.(string); ok {
			cond.Path.Segments = append(cond.Path.Segments, &pb.FieldPathSegment{Kind: &pb.FieldPathSegment_Key{Key: k}})
		} else {
			cond.Path.Segments = append(cond.Path.Segments, &pb.FieldPathSegment{Kind: &pb.FieldPathSegment_Index{Index: uint32(seg.(float64))}})
		}
	}
	if v, ok := d["value"]; ok {
		x, err := fromDesc(resolve(v))
		if err != nil {
			return nil, err
		}
		if cond.Value, err = agentstate.ToValue(x); err != nil {
			return nil, err
		}
	}
	return &pb.MemoryFilter{Kind: &pb.MemoryFilter_Field{Field: cond}}, nil
}

// filterOf is a step's filter: an expression map ("filter"), a typed tree ("tree"), or nil.
func filterOf(step obj) (any, error) {
	if t, ok := step["tree"].(map[string]any); ok {
		return treeOf(t)
	}
	if f, ok := step["filter"]; ok {
		return fromDesc(resolve(f))
	}
	return nil, nil
}

// memory plays the memory ops of scenarios/02_memory.json and 07_memory_trees.json.
func (r *runner) memory(c *agentstate.Client, step obj) (any, error) {
	ctx := context.Background()
	switch step["op"] {
	case "memory_put":
		v, err := fromDesc(resolve(step["value"]))
		if err != nil {
			return nil, err
		}
		value, _ := v.(map[string]any)
		opts := &agentstate.MemoryPutOptions{}
		if vecs, ok := step["vectors"].(map[string]any); ok {
			opts.Vectors = map[string][]float32{}
			for name, vec := range vecs {
				opts.Vectors[name] = floats(vec)
			}
		}
		return c.Memory.Put(ctx, strs(step["path"]), str(step, "key"), value, opts)
	case "memory_search":
		opts := &agentstate.MemorySearchOptions{Order: memoryOrders[str(step, "order")], Limit: 100}
		if n, ok := num(step, "limit"); ok {
			opts.Limit = uint32(n)
		}
		f, err := filterOf(step)
		if err != nil {
			return nil, err
		}
		opts.Filter = f
		if vec, ok := step["vector"]; ok {
			opts.Vector = floats(vec)
		}
		return c.Memory.Search(ctx, strs(step["prefix"]), opts)
	default:
		depth := uint32(0)
		if n, ok := num(step, "max_depth"); ok {
			depth = uint32(n)
		}
		paths, err := c.Memory.ListNamespaces(ctx, strs(step["prefix"]), nil, depth)
		return memoryPaths(paths), err
	}
}

func (r *runner) do(c *agentstate.Client, step obj) (any, error) {
	t := thread(step["thread"])
	if op, _ := step["op"].(string); strings.HasPrefix(op, "memory_") {
		return r.memory(c, step)
	}
	switch step["op"] {
	case "register_schema":
		var versions [][]*pb.MigrationStep
		for _, v := range asList(step["versions"]) {
			var steps []*pb.MigrationStep
			for _, d := range asList(v) {
				st, err := stepOf(d.(map[string]any))
				if err != nil {
					return nil, err
				}
				steps = append(steps, st)
			}
			versions = append(versions, steps)
		}
		policies := map[string]pb.FailurePolicy{"fail": pb.FailurePolicy_FAILURE_POLICY_FAIL,
			"degrade": pb.FailurePolicy_FAILURE_POLICY_DEGRADE, "new_run": pb.FailurePolicy_FAILURE_POLICY_NEW_RUN}
		policy, ok := policies[str(step, "failure_policy")]
		if !ok {
			policy = pb.FailurePolicy_FAILURE_POLICY_FAIL
		}
		return c.Schemas.Register(ctx, str(step, "name"), versions, 0, policy)
	case "create_thread":
		policy := map[string]pb.IfExists{"error": pb.IfExists_IF_EXISTS_ERROR, "return": pb.IfExists_IF_EXISTS_RETURN, "merge": pb.IfExists_IF_EXISTS_MERGE_METADATA}
		p := policy[str(step, "if_exists")]
		return c.Threads.CreateThread(ctx, &pb.CreateThreadRequest{Namespace: c.Namespace, ThreadId: t, Metadata: r.valueMap(step["metadata"]), IfExists: p})
	case "get_thread":
		return c.GetThread(ctx, t)
	case "update_thread":
		etag := ""
		if e, ok := step["etag"].(map[string]any); ok {
			etag = r.saved[e["saved"].(string)]
		}
		return c.UpdateThread(ctx, t, &agentstate.UpdateThreadOptions{SetMetadata: descMap(step["set_metadata"]), Etag: etag})
	case "delete_thread":
		return c.DeleteThread(ctx, t, nil)
	case "put":
		req := &pb.PutCheckpointRequest{Namespace: c.Namespace, ThreadId: t, CheckpointNs: str(step, "ns"), CheckpointId: str(step, "id"),
			ParentCheckpointId: str(step, "parent"), RequireThread: step["require_thread"] == true, Channels: map[string]*pb.ChannelWrite{},
			Metadata: r.valueMap(step["metadata"]), Schema: str(step, "schema")}
		if v, ok := num(step, "schema_version"); ok {
			req.SchemaVersion = uint32(v)
		}
		for name, spec := range expandChannels(step["channels"].(map[string]any)) {
			sm := spec.(map[string]any)
			if _, ok := sm["raw"]; ok {
				req.Channels[name] = &pb.ChannelWrite{Op: &pb.ChannelWrite_Value{Value: r.valueOf(sm)}}
				continue
			}
			w, err := agentstate.ChannelWrite(r.writeOf(sm), fmt.Sprintf("channels['%s']", name))
			if err != nil {
				return nil, err
			}
			req.Channels[name] = w
		}
		switch e := step["expected_head_etag"].(type) {
		case string:
			req.ExpectedHeadEtag = proto.String(e)
		case map[string]any:
			req.ExpectedHeadEtag = proto.String(r.saved[e["saved"].(string)])
		}
		return c.Threads.PutCheckpoint(ctx, req)
	case "put_writes":
		req := &pb.PutWritesRequest{Namespace: c.Namespace, ThreadId: t, CheckpointNs: str(step, "ns"), CheckpointId: str(step, "id")}
		for _, w := range asList(step["writes"]) {
			wm := w.(map[string]any)
			idx, _ := num(wm, "idx")
			req.Writes = append(req.Writes, &pb.PendingWrite{TaskId: str(wm, "task"), Idx: int32(idx), Channel: str(wm, "channel"),
				TaskPath: str(wm, "path"), Value: r.valueOf(wm["value"])})
		}
		return c.Threads.PutWrites(ctx, req)
	case "get":
		read, _ := num(step, "read_schema_version")
		return c.GetCheckpoint(ctx, t, str(step, "id"), &agentstate.GetOptions{CheckpointNs: str(step, "ns"), IncludePendingWrites: step["pending"] == true,
			ReadSchemaVersion: uint32(read)})
	case "list":
		o := &agentstate.ListOptions{MetadataFilter: descMap(step["filter"]), Before: str(step, "before")}
		if ns, ok := step["ns"].(string); ok {
			o.CheckpointNs = &ns
		}
		if n, ok := num(step, "limit"); ok {
			o.Limit = uint32(n)
		}
		if n, ok := num(step, "page_size"); ok {
			o.PageSize = uint32(n)
		}
		var out []*pb.Checkpoint
		for cp, err := range c.ListCheckpoints(ctx, t, o) {
			if err != nil {
				return nil, err
			}
			out = append(out, cp)
		}
		return out, nil
	case "diff":
		return c.Diff(ctx, t, str(step, "ns"), str(step, "from"), str(step, "to"))
	case "copy_thread":
		return c.CopyThread(ctx, thread(step["source"]), thread(step["target"]), nil, false)
	case "prune":
		var ids []string
		for _, x := range asList(step["threads"]) {
			ids = append(ids, thread(x))
		}
		n, _ := num(step, "keep_latest")
		return c.Prune(ctx, ids, agentstate.PruneOptions{KeepLatest: uint32(n)})
	case "append_items", "set_compaction_policy", "pop_item", "latest", "get_context", "set_pin":
		return r.doConversation(c, t, step)
	case "same_roots":
		a, b := step["a"].(map[string]any), step["b"].(map[string]any)
		ca, err := c.GetCheckpoint(ctx, thread(a["thread"]), str(a, "id"), &agentstate.GetOptions{OmitValues: true})
		if err != nil {
			return nil, err
		}
		cb, err := c.GetCheckpoint(ctx, thread(b["thread"]), str(b, "id"), &agentstate.GetOptions{OmitValues: true})
		return [2]*pb.Checkpoint{ca, cb}, err
	}
	return nil, fmt.Errorf("unknown op %v", step["op"])
}

var itemKinds = map[string]pb.ItemKind{"message": pb.ItemKind_ITEM_KIND_MESSAGE, "tool_call": pb.ItemKind_ITEM_KIND_TOOL_CALL,
	"tool_result": pb.ItemKind_ITEM_KIND_TOOL_RESULT, "reasoning": pb.ItemKind_ITEM_KIND_REASONING,
	"summary": pb.ItemKind_ITEM_KIND_SUMMARY, "tool_definition": pb.ItemKind_ITEM_KIND_TOOL_DEFINITION,
	"other": pb.ItemKind_ITEM_KIND_OTHER}

// conversationStep is what a conversation op returned, with its step (for the expectations).
type conversationStep struct {
	op     string
	result any
}

func (r *runner) knowledgeOf(step obj) []*pb.KnowledgeItem {
	var out []*pb.KnowledgeItem
	for _, d := range asList(step["knowledge"]) {
		out = append(out, &pb.KnowledgeItem{Kind: pb.ItemKind_ITEM_KIND_MESSAGE, Content: r.valueOf(d)})
	}
	return out
}

func (r *runner) doConversation(c *agentstate.Client, t string, step obj) (any, error) {
	op := step["op"].(string)
	var res any
	var err error
	switch op {
	case "append_items":
		var items []*pb.ItemInput
		for _, x := range asList(step["items"]) {
			it := x.(map[string]any)
			version, _ := num(it, "schema_version")
			items = append(items, &pb.ItemInput{Kind: itemKinds[str(it, "kind")], Role: str(it, "role"),
				CallId: str(it, "call_id"), ToolName: str(it, "tool_name"), ClientItemId: str(it, "client_item_id"),
				Content: r.valueOf(it["content"]), Tokens: tokenCount(it["tokens"]), Schema: str(it, "schema"),
				SchemaVersion: uint32(version)})
		}
		read, _ := num(step, "read_schema_version")
		o := &agentstate.AppendOptions{CreateThread: step["create_thread"] == true, ReadSchemaVersion: uint32(read)}
		if n, ok := num(step, "expected_last_seq"); ok {
			seq := uint64(n)
			o.ExpectedLastSeq = &seq
		}
		res, err = c.AppendItems(ctx, t, items, o)
	case "set_compaction_policy":
		p := step["policy"].(map[string]any)
		u := func(k string) *uint32 {
			if v, ok := p[k].(float64); ok {
				x := uint32(v)
				return &x
			}
			return nil
		}
		pol := &pb.CompactionPolicy{TriggerItems: u("trigger_items"), CompactItems: u("compact_items"), KeepLastItems: u("keep_last_items")}
		if v, ok := p["fallback_after_ms"].(float64); ok {
			pol.FallbackAfter = durationpb.New(time.Duration(v) * time.Millisecond)
		}
		res, err = c.Conversations.SetCompactionPolicy(ctx, &pb.SetCompactionPolicyRequest{Namespace: c.Namespace,
			Scope: pb.ConfigScope_CONFIG_SCOPE_THREAD, ThreadId: t, Policy: pol})
	case "pop_item":
		res, err = c.PopItem(ctx, t)
	case "latest":
		n, _ := num(step, "n")
		read, _ := num(step, "read_schema_version")
		res, err = c.LatestItems(ctx, t, uint32(n), agentstate.ReadSchemaVersion(uint32(read)))
	case "get_context":
		res, err = r.getContext(c, t, step)
	case "set_pin":
		pos, _ := num(step, "position")
		res, err = c.Conversations.SetPinnedItem(ctx, &pb.SetPinnedItemRequest{Namespace: c.Namespace,
			Scope: pb.ConfigScope_CONFIG_SCOPE_THREAD, ThreadId: t, PinId: str(step, "pin_id"), Position: int32(pos),
			Kind: itemKinds[str(step, "kind")], Role: str(step, "role"), Content: r.valueOf(step["content"]),
			Tokens: tokenCount(step["tokens"])})
	}
	if err != nil {
		return nil, err
	}
	return conversationStep{op, res}, nil
}

// tokenCount is a TokenCount from [count, tokenizer, exact] (nil when absent).
func tokenCount(x any) *pb.TokenCount {
	l, ok := x.([]any)
	if !ok {
		return nil
	}
	return &pb.TokenCount{Count: uint32(l[0].(float64)), Tokenizer: l[1].(string), Exact: l[2].(bool)}
}

func (r *runner) getContext(c *agentstate.Client, t string, step obj) (*pb.GetContextResponse, error) {
	n, _ := num(step, "budget")
	req := &pb.GetContextRequest{Namespace: c.Namespace, ThreadId: t, BudgetTokens: uint32(n),
		Knowledge: r.knowledgeOf(step), Tokenizer: str(step, "tokenizer")}
	if k, ok := num(step, "keep_last_items"); ok {
		keep := uint32(k)
		req.KeepLastItems = &keep
	}
	if mq, ok := step["memory_query"].(map[string]any); ok {
		f, err := filterOf(mq)
		if err != nil {
			return nil, err
		}
		o := &agentstate.MemoryQueryOptions{Filter: f, Order: memoryOrders[str(mq, "order")]}
		if vec, ok := mq["vector"]; ok {
			o.Vector = floats(vec)
		}
		if n, ok := num(mq, "limit"); ok {
			o.Limit = uint32(n)
		}
		if req.MemoryQuery, err = agentstate.NewMemoryQuery(strs(mq["prefix"]), o); err != nil {
			return nil, err
		}
	}
	return c.Conversations.GetContext(ctx, req)
}

// contextDesc is what a get_context step's "expect" may name, as clients/conformance/runner.py's
// context_desc says.
func contextDesc(res *pb.GetContextResponse) map[string]any {
	sources, tokens, estimated, expl := []any{}, []any{}, []any{}, []any{}
	for _, it := range res.Items {
		sources = append(sources, strings.ToLower(strings.TrimPrefix(it.Source.String(), "CONTEXT_SOURCE_")))
		tokens = append(tokens, it.Tokens)
		estimated = append(estimated, it.TokensEstimated)
	}
	for _, e := range res.Explanation {
		var head string
		switch src := e.Source.(type) {
		case *pb.ExplanationEntry_PinId:
			head = "pin:" + src.PinId
		case *pb.ExplanationEntry_KnowledgeIndex:
			head = fmt.Sprintf("knowledge:%d", src.KnowledgeIndex)
		case *pb.ExplanationEntry_Items:
			head = fmt.Sprintf("%d-%d", src.Items.FirstSeq, src.Items.LastSeq)
		}
		out := fmt.Sprintf("%s %s t=%d", head, strings.ToLower(strings.TrimPrefix(e.Fate.String(), "FATE_")), e.Tokens)
		if e.ContextIndex != nil {
			out += fmt.Sprintf(" @%d", *e.ContextIndex)
		}
		if e.SummaryId != "" {
			out += " " + e.SummaryId
		}
		if e.DuplicateOfSeq != 0 {
			out += fmt.Sprintf(" dup=%d", e.DuplicateOfSeq)
		}
		if e.MemoryHit != nil {
			out += " mem=" + memoryHit(e.MemoryHit)
		}
		expl = append(expl, out)
	}
	hits := []any{}
	for _, it := range res.Items {
		if it.MemoryHit != nil {
			hits = append(hits, memoryHit(it.MemoryHit))
		}
	}
	return map[string]any{"sources": sources, "tokens": tokens, "estimated": estimated, "total_tokens": res.TotalTokens,
		"stable_prefix_items": res.StablePrefixItems, "estimated_raw_tokens": res.EstimatedRawTokens,
		"client_counted_tokens": res.ClientCountedTokens, "explanation": expl, "memory_hits": hits}
}

// memoryHit names a context item's memory hit: "<path>/<key> v<version>[ scored]".
func memoryHit(h *pb.ContextMemoryHit) string {
	out := fmt.Sprintf("%s/%s v%d", strings.Join(h.Path, "/"), h.Key, h.Version)
	if h.Score != nil {
		out += " scored"
	}
	return out
}

func contextRecord(thread string, budget int, ctx *pb.GetContextResponse) obj {
	items := []any{}
	for _, i := range ctx.Items {
		items = append(items, []any{float64(i.Source), float64(i.Kind), i.Role, i.CallId, i.ToolName, valueBytes(i.Content)})
	}
	return obj{"kind": "context", "thread": thread, "budget": float64(budget), "hash": hex.EncodeToString(ctx.ContextHash),
		"items": items}
}

func (r *runner) expectConversation(where string, step obj, x conversationStep) {
	exp, _ := step["expect"].(map[string]any)
	switch res := x.result.(type) {
	case *pb.AppendItemsResponse:
		if v, ok := exp["last_seq"].(float64); ok {
			r.check(res.LastSeq == uint64(v), "%s: last_seq %d != %v", where, res.LastSeq, v)
		}
		if v, ok := exp["duplicates"].(float64); ok {
			r.check(res.Duplicates == uint32(v), "%s: duplicates %d != %v", where, res.Duplicates, v)
		}
		if want, ok := exp["migrations"]; ok {
			var got []any
			for _, it := range res.Items {
				got = append(got, migrationDesc(it.Migration, it.SchemaVersion, it.StoredSchemaVersion))
			}
			r.check(stable(got) == stable(want), "%s: migrations %s != %s", where, stable(got), stable(want))
		}
	case *pb.ConversationItem:
		if v, ok := exp["seq"].(float64); ok {
			r.check(res != nil && res.Seq == uint64(v), "%s: popped %v", where, res)
		}
	case []*pb.ConversationItem:
		var seqs []any
		for _, it := range res {
			seqs = append(seqs, float64(it.Seq))
		}
		r.check(stable(seqs) == stable(exp["seqs"]), "%s: seqs %v != %v", where, seqs, exp["seqs"])
		if want, ok := exp["contents"]; ok {
			r.check(len(res) == len(asList(want)), "%s: %d items", where, len(res))
			for i, d := range asList(want) {
				if i < len(res) {
					r.sameValue(res[i].Content, d, fmt.Sprintf("%s: item %d content", where, i))
				}
			}
		}
	case *pb.GetContextResponse:
		h, err := agentstate.ContextHash(res.Items)
		r.check(err == nil && hex.EncodeToString(h) == hex.EncodeToString(res.ContextHash), "%s: context hash computed here differs", where)
		n, _ := num(step, "budget")
		r.check(res.TotalTokens <= uint64(n), "%s: over budget", where)
		got := contextDesc(res)
		for _, k := range keysOf(exp) {
			r.check(stable(got[k]) == stable(exp[k]), "%s: %s %s != %s", where, k, stable(got[k]), stable(exp[k]))
		}
	}
}

// migrationDesc is [MigrationStatus name, schema_version, stored_schema_version] (runner.py's migration_desc).
func migrationDesc(m pb.MigrationStatus, version, stored uint32) []any {
	return []any{strings.TrimPrefix(m.String(), "MIGRATION_STATUS_"), version, stored}
}

// pathOf is a migration step's path: one name or a list of keys.
func pathOf(v any) []string {
	if s, ok := v.(string); ok {
		return []string{s}
	}
	return strs(v)
}

// stepOf is a MigrationStep of a scenario (runner.py's step_of).
func stepOf(d map[string]any) (*pb.MigrationStep, error) {
	types := map[string]pb.ValueType{"string": pb.ValueType_VALUE_TYPE_STRING, "int": pb.ValueType_VALUE_TYPE_INT,
		"float": pb.ValueType_VALUE_TYPE_FLOAT, "bool": pb.ValueType_VALUE_TYPE_BOOL, "list": pb.ValueType_VALUE_TYPE_LIST}
	switch {
	case d["rename"] != nil:
		return agentstate.Rename(pathOf(d["rename"]), str(d, "to")), nil
	case d["convert"] != nil:
		return agentstate.Convert(pathOf(d["convert"]), types[str(d, "to")]), nil
	case d["nest"] != nil:
		return agentstate.Nest(nil, strs(d["nest"]), str(d, "into")), nil
	case d["add"] != nil:
		return agentstate.AddField(pathOf(d["add"]), mustDesc(d["default"]))
	}
	return nil, fmt.Errorf("unknown migration step %v", d)
}

func (r *runner) sameValue(got *pb.Value, d any, what string) {
	want := hex.EncodeToString(agentstate.MustEncode(mustDesc(d)))
	mine := valueBytes(got)
	r.check(mine == want, "%s: value %.80s != expected %.80s", what, mine, want)
	if m, ok := got.GetKind().(*pb.Value_Msgpack); ok {
		r.check(hex.EncodeToString(m.Msgpack) == mine, "%s: server bytes differ from the re-encoding", what)
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sameKeys[V, W any](a map[string]V, b map[string]W) bool {
	return fmt.Sprint(keysOf(a)) == fmt.Sprint(keysOf(b))
}

func (r *runner) expect(where string, step obj, result any, err error) {
	exp, _ := step["expect"].(map[string]any)
	if e, ok := exp["error"].(map[string]any); ok {
		var ae *agentstate.Error
		if !errors.As(err, &ae) {
			r.check(false, "%s: expected %v, got %v", where, e, err)
			return
		}
		r.check(ae.CodeName() == e["code"], "%s: code %s != %v (%v)", where, ae.CodeName(), e["code"], ae)
		if reason, ok := e["reason"]; ok {
			r.check(ae.Reason == reason, "%s: reason %s != %v", where, ae.Reason, reason)
		}
		if field, ok := e["field"]; ok {
			r.check(ae.Field() == field, "%s: field %s != %v", where, ae.Field(), field)
		}
		if md, ok := e["metadata"].(map[string]any); ok {
			for _, k := range keysOf(md) {
				r.check(ae.Metadata[k] == md[k], "%s: metadata %s=%s != %v", where, k, ae.Metadata[k], md[k])
			}
		}
		return
	}
	if err != nil {
		r.check(false, "%s: unexpected error %v", where, err)
		return
	}
	r.passed++
	op := step["op"]
	if save := str(step, "save"); save != "" {
		switch x := result.(type) {
		case *pb.PutCheckpointResponse:
			r.saved[save] = x.Checkpoint.Etag
		case *pb.CreateThreadResponse:
			r.saved[save] = x.Thread.Etag
		case *pb.Thread:
			r.saved[save] = x.Etag
		}
	}
	created, hasCreated := exp["created"]
	switch x := result.(type) {
	case *pb.CreateThreadResponse:
		if hasCreated {
			r.check(x.Created == created, "%s: created %v", where, x.Created)
		}
		r.expectThreadMetadata(where, x.Thread, exp)
	case *pb.Thread:
		r.expectThreadMetadata(where, x, exp)
	case *pb.PutCheckpointResponse:
		if hasCreated {
			r.check(x.Created == created, "%s: created %v", where, x.Created)
		}
	case *pb.PutMemoryItemResponse:
		if hasCreated {
			r.check(x.Created == created, "%s: created %v", where, x.Created)
		}
	case []*pb.ScoredMemoryItem:
		got := []any{}
		for _, h := range x {
			got = append(got, []any{strings.Join(h.Item.Path, "/"), h.Item.Key})
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(exp["keys"])
		r.check(string(gb) == string(wb), "%s: keys %s != %s", where, gb, wb)
	case memoryPaths:
		got := []any{}
		for _, p := range x {
			got = append(got, strings.Join(p, "/"))
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(exp["paths"])
		r.check(string(gb) == string(wb), "%s: paths %s != %s", where, gb, wb)
	case *pb.PutWritesResponse:
		if n, ok := num(exp, "stored"); ok {
			r.check(int(x.Stored) == n, "%s: stored %d", where, x.Stored)
		}
		if n, ok := num(exp, "kept"); ok {
			r.check(int(x.Kept) == n, "%s: kept %d", where, x.Kept)
		}
	case *pb.DeleteThreadResponse:
		if d, ok := exp["deleted"]; ok {
			r.check(x.Deleted == d, "%s: deleted %v", where, x.Deleted)
		}
	case *pb.CopyThreadResponse:
		if n, ok := num(exp, "copied"); ok {
			r.check(int(x.CopiedCheckpoints) == n, "%s: copied %d", where, x.CopiedCheckpoints)
		}
	case uint64:
		if n, ok := num(exp, "deleted"); ok {
			r.check(int(x) == n, "%s: pruned %d", where, x)
		}
	case []*pb.Checkpoint:
		var ids []any
		for _, cp := range x {
			ids = append(ids, cp.CheckpointId)
		}
		want := asList(exp["ids"])
		r.check(fmt.Sprint(ids) == fmt.Sprint(want), "%s: ids %v != %v", where, ids, want)
	case []*pb.ChannelChange:
		sort.Slice(x, func(i, j int) bool { return x[i].Channel < x[j].Channel })
		want := asList(exp["changes"])
		var got []any
		for i, ch := range x {
			full := obj{"channel": ch.Channel, "kind": strings.TrimPrefix(ch.Kind.String(), "CHANGE_KIND_"), "lists": ch.Lists,
				"appended": ch.Appended, "from_length": float64(ch.FromLength), "to_length": float64(ch.ToLength), "common_prefix": float64(ch.CommonPrefix)}
			sel := obj{}
			if i < len(want) {
				for k := range want[i].(map[string]any) {
					sel[k] = full[k]
				}
			}
			got = append(got, sel)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		r.check(string(gb) == string(wb), "%s: changes %s != %s", where, gb, wb)
	case [2]*pb.Checkpoint:
		roots := func(cp *pb.Checkpoint) string {
			var parts []string
			for _, k := range keysOf(cp.Channels) {
				parts = append(parts, k+"="+hex.EncodeToString(cp.Channels[k].Root))
			}
			return strings.Join(parts, ",")
		}
		r.check(roots(x[0]) == roots(x[1]) && len(x[0].Channels) > 0, "%s: roots differ", where)
	case *pb.Checkpoint:
		r.expectCheckpoint(where, x, exp)
	case conversationStep:
		r.expectConversation(where, step, x)
	}
	_ = op
}

func (r *runner) expectThreadMetadata(where string, th *pb.Thread, exp obj) {
	want, ok := exp["metadata"].(map[string]any)
	if !ok {
		return
	}
	r.check(sameKeys(th.Metadata, want), "%s: metadata keys %v", where, keysOf(th.Metadata))
	for k, d := range want {
		if v, ok := th.Metadata[k]; ok {
			r.sameValue(v, d, where+": metadata["+k+"]")
		}
	}
}

func (r *runner) expectCheckpoint(where string, cp *pb.Checkpoint, exp obj) {
	if want, ok := exp["migration"]; ok {
		got := migrationDesc(cp.Migration, cp.SchemaVersion, cp.StoredSchemaVersion)
		r.check(stable(got) == stable(want), "%s: migration %s != %s", where, stable(got), stable(want))
	}
	if id, ok := exp["id"]; ok {
		r.check(cp.CheckpointId == id, "%s: id %s", where, cp.CheckpointId)
	}
	if p, ok := exp["parent"]; ok {
		r.check(cp.ParentCheckpointId == p, "%s: parent %s", where, cp.ParentCheckpointId)
	}
	if ch, ok := exp["channels"].(map[string]any); ok {
		want := expandExpected(ch)
		r.check(sameKeys(cp.Channels, want), "%s: channels %v", where, keysOf(cp.Channels))
		for name, d := range want {
			if got, ok := cp.Channels[name]; ok {
				r.sameValue(got.GetValue(), d, where+": channel "+name)
			}
		}
	}
	if md, ok := exp["metadata"].(map[string]any); ok {
		r.check(sameKeys(cp.Metadata, md), "%s: metadata keys %v", where, keysOf(cp.Metadata))
		for k, d := range md {
			if v, ok := cp.Metadata[k]; ok {
				r.sameValue(v, d, where+": metadata["+k+"]")
			}
		}
	}
	if pw, ok := exp["pending_writes"]; ok {
		want := asList(pw)
		var got, wantKeys []string
		for _, w := range cp.PendingWrites {
			got = append(got, fmt.Sprintf("%s/%d/%s", w.TaskId, w.Idx, w.Channel))
		}
		for _, w := range want {
			wm := w.(map[string]any)
			idx, _ := num(wm, "idx")
			wantKeys = append(wantKeys, fmt.Sprintf("%s/%d/%s", wm["task"], idx, wm["channel"]))
		}
		r.check(fmt.Sprint(got) == fmt.Sprint(wantKeys), "%s: pending writes %v", where, got)
		for i, w := range cp.PendingWrites {
			if i < len(want) {
				r.sameValue(w.Value, want[i].(map[string]any)["value"], fmt.Sprintf("%s: write %s/%d", where, w.TaskId, w.Idx))
			}
		}
	}
}

func recordOf(cp *pb.Checkpoint) obj {
	vb := func(v *pb.Value) string { return kindName(v) + ":" + valueBytes(v) }
	channels, metadata := obj{}, obj{}
	for k, v := range cp.Channels {
		channels[k] = obj{"root": hex.EncodeToString(v.Root), "value": vb(v.GetValue())}
	}
	for k, v := range cp.Metadata {
		metadata[k] = vb(v)
	}
	writes := []any{}
	for _, w := range cp.PendingWrites {
		writes = append(writes, []any{w.TaskId, float64(w.Idx), w.Channel, vb(w.Value)})
	}
	return obj{"thread": cp.ThreadId, "ns": cp.CheckpointNs, "id": cp.CheckpointId, "etag": cp.Etag,
		"channels": channels, "metadata": metadata, "writes": writes}
}

// stable is JSON with sorted keys (encoding/json sorts map keys), for comparing records of any language.
func stable(v any) string {
	b, _ := json.Marshal(v)
	var x any
	_ = json.Unmarshal(b, &x)
	b, _ = json.Marshal(x)
	return string(b)
}

func (r *runner) codecChecks() {
	for name, d := range values {
		mine := hex.EncodeToString(agentstate.MustEncode(mustDesc(d)))
		r.check(mine == encodings[name], "encode %s: %s != pinned %s", name, mine, encodings[name])
		b, _ := hex.DecodeString(encodings[name])
		again, err := agentstate.Canonicalize(b)
		r.check(err == nil && hex.EncodeToString(again) == encodings[name], "decode+encode %s: %x %v", name, again, err)
	}
}

func (r *runner) ns(lang string) string { return "conf-" + r.run + "-" + lang }

func (r *runner) writePass() (obj, error) {
	r.codecChecks()
	c, err := agentstate.Dial(r.address, &agentstate.Options{Namespace: r.ns(r.lang), NoRequestIDs: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for _, sc := range scenarios {
		for i, s := range asList(sc["steps"]) {
			step := s.(map[string]any)
			where := fmt.Sprintf("%s#%d %s", sc["name"], i, step["op"])
			result, err := r.do(c, step)
			r.expect(where, step, result, err)
			if label := str(step, "record"); label != "" && err == nil {
				key := fmt.Sprintf("%s/%s", sc["name"], label)
				if cs, ok := result.(conversationStep); ok {
					n, _ := num(step, "budget")
					r.records[key] = contextRecord(thread(step["thread"]), n, cs.result.(*pb.GetContextResponse))
				} else {
					r.records[key] = recordOf(result.(*pb.Checkpoint))
				}
			}
		}
	}
	return obj{"lang": r.lang, "namespace": r.ns(r.lang), "records": r.records}, nil
}

func (r *runner) readPass(own, peer obj) error {
	steps := map[string]obj{}
	for _, sc := range scenarios {
		for _, s := range asList(sc["steps"]) {
			step := s.(map[string]any)
			if label := str(step, "record"); label != "" {
				steps[fmt.Sprintf("%s/%s", sc["name"], label)] = step
			}
		}
	}
	c, err := agentstate.Dial(r.address, &agentstate.Options{Namespace: peer["namespace"].(string)})
	if err != nil {
		return err
	}
	defer c.Close()
	peerRecords := peer["records"].(map[string]any)
	ownRecords := own["records"].(map[string]any)
	for _, label := range keysOf(peerRecords) {
		rec := peerRecords[label].(map[string]any)
		step := steps[label]
		where := fmt.Sprintf("read %s:%s", peer["lang"], label)
		if rec["kind"] == "context" {
			budget := int(rec["budget"].(float64))
			got, err := r.getContext(c, rec["thread"].(string), step)
			if err != nil {
				r.check(false, "%s: %v", where, err)
				continue
			}
			mine := contextRecord(rec["thread"].(string), budget, got)
			r.check(stable(mine) == stable(rec), "%s: context differs from what %s recorded", where, peer["lang"])
			ours, ok := ownRecords[label].(map[string]any)
			r.check(ok && ours["hash"] == rec["hash"] && stable(ours["items"]) == stable(rec["items"]),
				"%s: context bytes or hash differ from %s's own write", where, r.lang)
			h, err := agentstate.ContextHash(got.Items)
			r.check(err == nil && hex.EncodeToString(h) == rec["hash"], "%s: hash recomputed here differs", where)
			continue
		}
		cp, err := c.GetCheckpoint(ctx, rec["thread"].(string), rec["id"].(string), &agentstate.GetOptions{CheckpointNs: rec["ns"].(string), IncludePendingWrites: step["pending"] == true})
		if err != nil {
			r.check(false, "%s: %v", where, err)
			continue
		}
		exp, _ := step["expect"].(map[string]any)
		r.expectCheckpoint(where, cp, exp)
		mine := recordOf(cp)
		r.check(stable(mine) == stable(rec), "%s: checkpoint differs from what %s recorded", where, peer["lang"])
		ours, ok := ownRecords[label].(map[string]any)
		roots := func(x obj) string {
			m := obj{}
			for k, v := range x["channels"].(map[string]any) {
				m[k] = v.(map[string]any)["root"]
			}
			return stable(m)
		}
		r.check(ok && roots(ours) == roots(rec), "%s: root hashes differ from %s's own write", where, r.lang)
		r.check(ok && ours["etag"] == rec["etag"], "%s: etag differs from %s's own write", where, r.lang)
		tail := func(x obj) string {
			var ws []any
			for _, w := range asList(x["writes"]) {
				ws = append(ws, w.([]any)[1:])
			}
			return stable([]any{x["metadata"], ws})
		}
		r.check(ok && tail(ours) == tail(rec), "%s: metadata or writes differ from %s's own write", where, r.lang)
		for name, ch := range cp.Channels {
			if m, ok := ch.GetValue().GetKind().(*pb.Value_Msgpack); ok {
				r.check(valueBytes(ch.GetValue()) == hex.EncodeToString(m.Msgpack), "%s: %s re-encoded differently", where, name)
			}
		}
	}
	return nil
}

func main() {
	address := flag.String("address", "", "sidecar address")
	lang := flag.String("lang", "go", "this runner's language tag")
	run := flag.String("run", "", "run id")
	dir := flag.String("dir", "", "records directory")
	mode := flag.String("mode", "", "write or read")
	peers := flag.String("peers", "", "languages to read (read mode)")
	flag.Parse()
	r := &runner{address: *address, lang: *lang, run: *run, saved: map[string]string{}, records: map[string]any{}}
	func() {
		defer func() {
			if p := recover(); p != nil {
				r.check(false, "runner stopped: %v", p)
			}
		}()
		if err := load(); err != nil {
			r.check(false, "load: %v", err)
			return
		}
		if *mode == "write" {
			data, err := r.writePass()
			if err != nil {
				r.check(false, "write pass: %v", err)
				return
			}
			b, _ := json.MarshalIndent(data, "", " ")
			if err := os.WriteFile(filepath.Join(*dir, *lang+".json"), b, 0o644); err != nil {
				r.check(false, "write records: %v", err)
			}
			return
		}
		var own obj
		if err := readJSON(filepath.Join(*dir, *lang+".json"), &own); err != nil {
			r.check(false, "own records: %v", err)
			return
		}
		for _, p := range strings.Split(*peers, ",") {
			if p == "" {
				continue
			}
			var peer obj
			if err := readJSON(filepath.Join(*dir, p+".json"), &peer); err != nil {
				r.check(false, "records of %s: %v", p, err)
				continue
			}
			if err := r.readPass(own, peer); err != nil {
				r.check(false, "read %s: %v", p, err)
			}
		}
	}()
	fmt.Printf("conformance[%s/%s]: %d passed, %d failed\n", *lang, *mode, r.passed, r.failed)
	if r.failed > 0 {
		os.Exit(1)
	}
}
