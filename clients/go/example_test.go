package agentstate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	agentstate "github.com/agentstate/sidecar/clients/go"
)

// The README's example (compiled by go test; it needs a running sidecar to run).
func ExampleDial() {
	c, err := agentstate.Dial("unix:sidecar-data/sidecar.sock", nil) // or "127.0.0.1:7421"
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, err := c.PutCheckpoint(ctx, "thread-1", map[string]any{"messages": []any{"hi"}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.PutCheckpoint(ctx, "thread-1", map[string]any{"messages": agentstate.Append{Items: []any{"hello"}}},
		&agentstate.PutOptions{ParentID: first.Checkpoint.CheckpointId, ExpectedHeadEtag: &first.Checkpoint.Etag})
	if errors.Is(err, agentstate.ErrFailedPrecondition) {
		log.Print("someone else moved the head")
	}
	for cp, err := range c.ListCheckpoints(ctx, "thread-1", nil) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(cp.CheckpointId)
	}
}
