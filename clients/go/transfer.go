package agentstate

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// Transfer is the TransferService stub with helpers (docs/export-format.md): c.Transfer.ExportNamespace streams a
// namespace's export file (the one `sidecar export` writes) into an io.Writer, c.Transfer.ImportNamespace sends
// one from an io.Reader into a serving sidecar. Both need an admin credential when the sidecar runs with auth.
// Neither is retried (streams): a failed export is made again from the start, a failed import wrote nothing. A
// context without a deadline gets none (the client's Timeout is for unary calls).
type Transfer struct {
	pb.TransferServiceClient
	namespace string
}

// UploadChunk is the most file bytes in one ImportNamespace data message.
const UploadChunk = 1 << 20

// ExportOptions are the optional fields of ExportNamespace.
type ExportOptions struct {
	ThreadID        string // only this thread (no memory or namespace settings)
	RefuseEncrypted bool   // refuse (EXPORT_PLAINTEXT_REFUSED) instead of writing an encrypted namespace in plaintext
	ChunkBytes      uint32 // the most file bytes in one message (0: the server's 1 MiB)
	// Progress, when set, is called with each progress message ("threads", "memory").
	Progress func(*pb.TransferProgress)
}

// ExportNamespace writes the export file of namespace ("" the client's) into w as it arrives and returns the
// summary. An error means the file is not whole: the stream failed, ended without its summary, or held another
// number of bytes than the summary says; what w got is then to be thrown away.
func (t *Transfer) ExportNamespace(ctx context.Context, namespace string, w io.Writer, o *ExportOptions) (*pb.ExportSummary, error) {
	if o == nil {
		o = &ExportOptions{}
	}
	if namespace == "" {
		namespace = t.namespace
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := t.TransferServiceClient.ExportNamespace(ctx, &pb.ExportNamespaceRequest{Namespace: namespace,
		ThreadId: o.ThreadID, RefuseEncrypted: o.RefuseEncrypted, ChunkBytes: o.ChunkBytes})
	if err != nil {
		return nil, err
	}
	var summary *pb.ExportSummary
	var written uint64
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, FromError(err)
		}
		switch part := msg.Part.(type) {
		case *pb.ExportNamespaceResponse_Data:
			n, err := w.Write(part.Data)
			written += uint64(n)
			if err != nil {
				return nil, err
			}
		case *pb.ExportNamespaceResponse_Progress:
			if o.Progress != nil {
				o.Progress(part.Progress)
			}
		case *pb.ExportNamespaceResponse_Summary:
			summary = part.Summary
		}
	}
	if summary == nil {
		return nil, errors.New("agentstate: the export stream ended without its summary: the file is not whole")
	}
	if written != summary.GetBytes() {
		return nil, fmt.Errorf("agentstate: the export stream held %d bytes, its summary says %d: the file is not whole",
			written, summary.GetBytes())
	}
	return summary, nil
}

// ImportOptions are the optional fields of ImportNamespace.
type ImportOptions struct {
	Namespace      string // the namespace to import into (default: the one the file's header names)
	Replace        bool   // replace threads and memory items that exist in the target
	CheckOnly      bool   // verify the file and check conflicts, write nothing
	AllowPlaintext bool   // import a file of an encrypted namespace into one without a key here
	// Size is the file's size when known (0: taken from an *os.File or a reader with Len, else unknown); a
	// stream that ends short of it is refused.
	Size uint64
	// Progress, when set, is called after each chunk sent with the bytes sent and Size.
	Progress func(sent, size uint64)
}

// FileNamespace is the namespace an export file's header names, read from its first bytes (the import
// verifies the rest).
func FileNamespace(head []byte) (string, error) {
	if len(head) < 4 {
		return "", errors.New("agentstate: not an export file (too short)")
	}
	n := binary.BigEndian.Uint32(head)
	if n > 1<<20 || uint64(len(head)) < 4+uint64(n) {
		return "", errors.New("agentstate: not an export file (no header)")
	}
	h, err := Decode(head[4 : 4+n])
	if err != nil {
		return "", errors.New("agentstate: not an export file (its header does not decode)")
	}
	m, _ := h.(map[string]any)
	scope, _ := m["scope"].(map[string]any)
	ns, ok := scope["namespace"].(string)
	if m["t"] != "header" || !ok {
		return "", errors.New("agentstate: not an export file (no header naming a namespace)")
	}
	return ns, nil
}

// ImportNamespace sends the export file read from r into o.Namespace (default: the namespace the file names).
// Nothing is written unless the whole file arrives intact and conflicts nothing (or o.Replace).
func (t *Transfer) ImportNamespace(ctx context.Context, r io.Reader, o *ImportOptions) (*pb.ImportNamespaceResponse, error) {
	if o == nil {
		o = &ImportOptions{}
	}
	size := o.Size
	if size == 0 {
		switch v := r.(type) {
		case *os.File:
			if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
				if pos, err := v.Seek(0, io.SeekCurrent); err == nil {
					size = uint64(st.Size() - pos)
				}
			}
		case interface{ Len() int }:
			size = uint64(v.Len())
		}
	}
	namespace := o.Namespace
	if namespace == "" {
		var head bytes.Buffer
		if _, err := io.CopyN(&head, r, 4); err != nil {
			return nil, errors.New("agentstate: not an export file (too short)")
		}
		n := binary.BigEndian.Uint32(head.Bytes())
		if n <= 1<<20 {
			if _, err := io.CopyN(&head, r, int64(n)); err != nil {
				return nil, errors.New("agentstate: not an export file (no header)")
			}
		}
		ns, err := FileNamespace(head.Bytes())
		if err != nil {
			return nil, err
		}
		namespace = ns
		r = io.MultiReader(bytes.NewReader(head.Bytes()), r)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := t.TransferServiceClient.ImportNamespace(ctx)
	if err != nil {
		return nil, err
	}
	header := &pb.ImportHeader{Namespace: namespace, Replace: o.Replace, CheckOnly: o.CheckOnly, Size: size,
		AllowPlaintext: o.AllowPlaintext}
	if err := stream.Send(&pb.ImportNamespaceRequest{Part: &pb.ImportNamespaceRequest_Header{Header: header}}); err != nil {
		return closeImport(stream, err)
	}
	buf := make([]byte, UploadChunk)
	var sent uint64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if err := stream.Send(&pb.ImportNamespaceRequest{Part: &pb.ImportNamespaceRequest_Data{Data: chunk}}); err != nil {
				return closeImport(stream, err)
			}
			sent += uint64(n)
			if o.Progress != nil {
				o.Progress(sent, size)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			cancel() // a file that could not be read whole is not sent: the server writes nothing
			return nil, rerr
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, FromError(err)
	}
	return resp, nil
}

// closeImport gets the server's status after Send failed (io.EOF: the server ended the call).
func closeImport(stream pb.TransferService_ImportNamespaceClient, err error) (*pb.ImportNamespaceResponse, error) {
	if err == io.EOF {
		_, err = stream.CloseAndRecv()
	}
	return nil, FromError(err)
}

// ResumeOptions are the optional fields of ResumeThread.
type ResumeOptions struct {
	CheckpointNs         string
	IncludePendingWrites bool
	RequestID            string // filled in (a UUID) unless given or Options.NoRequestIDs
	// Run holds the options of the run created under NEW_RUN, as CreateRun takes them (RunId, Metadata,
	// LeaseTimeout, ...); its Namespace, ThreadId, CheckpointNs, StartCheckpointId and RequestId stay empty.
	// Claim is forced true when Run is nil.
	Run *pb.CreateRunRequest
}

// Resumed is the answer of ResumeThread: the checkpoint as GetCheckpoint reads it, and when the schema's
// NEW_RUN policy fell back to an older checkpoint (Checkpoint.Migration NEW_RUN), the run created from it
// (Run) and, when it was claimed, the run held (Held).
type Resumed struct {
	Checkpoint *pb.Checkpoint
	Run        *pb.CreateRunResponse
	Held       *HeldRun
}

// ResumeThread is ThreadService.ResumeThread: the latest checkpoint of threadID read at readSchemaVersion and,
// under the schema's NEW_RUN policy when the latest checkpoint does not migrate, the run the server created in
// the same transaction, linked to the chain that did not migrate by its metadata (new_run_from, schema,
// schema_version, reason). Retried with its request id (a repeat answers the first response).
func (c *Client) ResumeThread(ctx context.Context, threadID string, readSchemaVersion uint32, o *ResumeOptions) (*Resumed, error) {
	if o == nil {
		o = &ResumeOptions{}
	}
	run := o.Run
	if run == nil {
		run = &pb.CreateRunRequest{Claim: true}
	}
	resp, err := c.Threads.ResumeThread(ctx, &pb.ResumeThreadRequest{Namespace: c.Namespace, ThreadId: threadID,
		CheckpointNs: o.CheckpointNs, ReadSchemaVersion: readSchemaVersion, Run: run,
		IncludePendingWrites: o.IncludePendingWrites, RequestId: c.rid(o.RequestID)})
	if err != nil {
		return nil, err
	}
	out := &Resumed{Checkpoint: resp.GetCheckpoint(), Run: resp.GetRun()}
	if resp.GetRun().GetLease() != nil {
		out.Held = newHeldRun(c, resp.GetRun().GetRun(), resp.GetRun().GetLease())
	}
	return out, nil
}
