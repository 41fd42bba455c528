package agentstate

import (
	"context"
	"errors"
	"io"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// Schemas is the SchemaService stub with helpers (docs/lifecycle.md "Schema versions and migrations"), in the
// client's namespace: c.Schemas.Register, Get, MigrateThread, MigrateNamespace. Steps are built with Rename,
// Drop, AddField, Nest, Unnest, Convert and MapItems; a path is the list of keys from a channel into its maps.
type Schemas struct {
	pb.SchemaServiceClient
	namespace string
}

// Rename renames the field at path to to.
func Rename(path []string, to string) *pb.MigrationStep {
	return &pb.MigrationStep{Op: &pb.MigrationStep_Rename{Rename: &pb.RenameField{Path: path, To: to}}}
}

// Drop removes the field at path.
func Drop(path []string) *pb.MigrationStep {
	return &pb.MigrationStep{Op: &pb.MigrationStep_Drop{Drop: &pb.DropField{Path: path}}}
}

// AddField sets the field at path to def when it is absent.
func AddField(path []string, def any) (*pb.MigrationStep, error) {
	v, err := ToValue(def)
	if err != nil {
		return nil, err
	}
	return &pb.MigrationStep{Op: &pb.MigrationStep_Add{Add: &pb.AddField{Path: path, Default: v}}}, nil
}

// Nest moves fields of the map at path into its map into.
func Nest(path, fields []string, into string) *pb.MigrationStep {
	return &pb.MigrationStep{Op: &pb.MigrationStep_Nest{Nest: &pb.NestFields{Path: path, Fields: fields, Into: into}}}
}

// Unnest moves fields (all when empty) of the map from (in the map at path) up.
func Unnest(path []string, from string, fields []string) *pb.MigrationStep {
	return &pb.MigrationStep{Op: &pb.MigrationStep_Unnest{Unnest: &pb.UnnestFields{Path: path, From: from, Fields: fields}}}
}

// Convert converts the value at path to the type to.
func Convert(path []string, to pb.ValueType) *pb.MigrationStep {
	return &pb.MigrationStep{Op: &pb.MigrationStep_Convert{Convert: &pb.ConvertField{Path: path, To: to}}}
}

// MapItems applies steps to every item of the list at path.
func MapItems(path []string, steps ...*pb.MigrationStep) *pb.MigrationStep {
	return &pb.MigrationStep{Op: &pb.MigrationStep_MapItems{MapItems: &pb.MapItems{Path: path, Steps: steps}}}
}

// Register creates or updates a schema: versions[k] holds the steps from version k to k+1 (versions[0] none).
func (s *Schemas) Register(ctx context.Context, name string, versions [][]*pb.MigrationStep, minReadable uint32,
	policy pb.FailurePolicy) (*pb.RegisterSchemaResponse, error) {
	schema := &pb.Schema{Name: name, MinReadableVersion: minReadable, FailurePolicy: policy}
	for i, steps := range versions {
		schema.Versions = append(schema.Versions, &pb.SchemaVersion{Version: uint32(i + 1), Steps: steps})
	}
	return s.RegisterSchema(ctx, &pb.RegisterSchemaRequest{Namespace: s.namespace, Schema: schema})
}

// Get returns one schema.
func (s *Schemas) Get(ctx context.Context, name string) (*pb.Schema, error) {
	resp, err := s.GetSchema(ctx, &pb.GetSchemaRequest{Namespace: s.namespace, Name: name})
	if err != nil {
		return nil, err
	}
	return resp.Schema, nil
}

// MigrateThread rewrites a thread's checkpoints to target (0: the latest), calling progress (when not nil)
// after each batch; it returns the final progress. Calling it again after an interruption finishes the rest.
func (s *Schemas) MigrateThread(ctx context.Context, threadID, schema string, target uint32,
	progress func(*pb.MigrationProgress)) (*pb.MigrationProgress, error) {
	stream, err := s.SchemaServiceClient.MigrateThread(ctx, &pb.MigrateThreadRequest{Namespace: s.namespace,
		ThreadId: threadID, Schema: schema, TargetVersion: target})
	if err != nil {
		return nil, err
	}
	return drain(func() (*pb.MigrationProgress, bool, error) {
		r, err := stream.Recv()
		return r.GetProgress(), r.GetDone(), err
	}, progress)
}

// MigrateNamespace is MigrateThread for every thread of the namespace.
func (s *Schemas) MigrateNamespace(ctx context.Context, schema string, target uint32,
	progress func(*pb.MigrationProgress)) (*pb.MigrationProgress, error) {
	stream, err := s.SchemaServiceClient.MigrateNamespace(ctx, &pb.MigrateNamespaceRequest{Namespace: s.namespace,
		Schema: schema, TargetVersion: target})
	if err != nil {
		return nil, err
	}
	return drain(func() (*pb.MigrationProgress, bool, error) {
		r, err := stream.Recv()
		return r.GetProgress(), r.GetDone(), err
	}, progress)
}

func drain(recv func() (*pb.MigrationProgress, bool, error), progress func(*pb.MigrationProgress)) (*pb.MigrationProgress, error) {
	for {
		p, done, err := recv()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("agentstate: the migration stream ended without its summary")
		}
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(p)
		}
		if done {
			return p, nil
		}
	}
}
