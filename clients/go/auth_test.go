package agentstate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// authSidecar is a sidecar with --auth-file (tokens made by `sidecar token`) and TLS on loopback
// TCP (certificates made by the repo's tests/certs.py).
type authSidecar struct {
	proc           *sidecarProc
	tcp            string
	port           int
	writer, reader string
	pki            string
}

func makeToken(t *testing.T, authFile, role, ns string) string {
	t.Helper()
	cmd := exec.Command(sidecarPython(), "-m", "sidecar", "token", "--role", role, "--namespace", ns, "--append", authFile)
	cmd.Dir = repoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sidecar token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func freeTCPPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startAuthSidecar(t *testing.T) *authSidecar {
	t.Helper()
	proc, err := newSidecar()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.cleanup)
	pki := filepath.Join(proc.dir, "pki")
	cmd := exec.Command(sidecarPython(), filepath.Join(repoRoot(), "tests", "certs.py"), pki)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("certs.py: %v\n%s", err, out)
	}
	authFile := filepath.Join(proc.dir, "auth.toml")
	s := &authSidecar{proc: proc, pki: pki}
	s.writer = makeToken(t, authFile, "write", "team-go")
	s.reader = makeToken(t, authFile, "read", "team-go")
	s.port = freeTCPPort(t)
	s.tcp = fmt.Sprintf("127.0.0.1:%d", s.port)
	proc.extra = []string{s.tcp}
	proc.args = []string{"--auth-file", authFile, "--tls-cert", filepath.Join(pki, "server.pem"), "--tls-key", filepath.Join(pki, "server.key")}
	if err := proc.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *authSidecar) tlsConfig(t *testing.T) *tls.Config {
	ca, err := os.ReadFile(filepath.Join(s.pki, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("bad CA")
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func TestTokenAndTLS(t *testing.T) {
	s := startAuthSidecar(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := Dial(s.tcp, &Options{Namespace: "team-go", Token: s.writer, TLS: s.tlsConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.PutCheckpoint(ctx, "t-go", map[string]any{"n": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	v, err := c.GetValues(ctx, "t-go", "", nil)
	if err != nil || v["n"] != int64(1) {
		t.Fatalf("GetValues = %v, %v", v, err)
	}
	// a server stream carries the token too
	if _, err := c.Events.AppendEvents(ctx, &pb.AppendEventsRequest{Namespace: "team-go", ThreadId: "t-go", Events: []*pb.EventInput{{Type: "note"}}}); err != nil {
		t.Fatal(err)
	}
	stream, err := c.Events.WatchEvents(ctx, &pb.WatchEventsRequest{Namespace: "team-go", ThreadId: "t-go"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.Event.GetType() != "note" {
		t.Fatalf("WatchEvents = %v, %v", ev, err)
	}

	// by name: the server certificate names localhost
	byName, err := Dial(fmt.Sprintf("localhost:%d", s.port), &Options{Namespace: "team-go", Token: s.writer, TLS: s.tlsConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer byName.Close()
	if _, err := byName.GetThread(ctx, "t-go"); err != nil {
		t.Fatal(err)
	}
}

func TestTokenDenials(t *testing.T) {
	s := startAuthSidecar(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(name string, opts *Options, address string, call func(*Client) error, sentinel error, reason string) {
		t.Helper()
		opts.Timeout = 5 * time.Second
		c, err := Dial(address, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		err = call(c)
		var e *Error
		if !errors.Is(err, sentinel) || !errors.As(err, &e) || e.Reason != reason {
			t.Errorf("%s: got %v, want %v %s", name, err, sentinel, reason)
		}
	}
	get := func(c *Client) error { _, err := c.GetThread(ctx, "missing"); return err }
	put := func(c *Client) error {
		_, err := c.PutCheckpoint(ctx, "t-denied", map[string]any{"n": int64(1)}, nil)
		return err
	}
	check("no token", &Options{Namespace: "team-go", TLS: s.tlsConfig(t)}, s.tcp, get, ErrUnauthenticated, "AUTH_REQUIRED")
	check("wrong token", &Options{Namespace: "team-go", Token: "ast_wrong", TLS: s.tlsConfig(t)}, s.tcp, get, ErrUnauthenticated, "AUTH_INVALID")
	check("other namespace", &Options{Namespace: "elsewhere", Token: s.writer}, s.proc.address, put, ErrPermissionDenied, "NAMESPACE_DENIED")
	check("read-only write", &Options{Namespace: "team-go", Token: s.reader}, s.proc.address, put, ErrPermissionDenied, "ROLE_DENIED")
	check("read-only read", &Options{Namespace: "team-go", Token: s.reader}, s.proc.address, get, ErrNotFound, "THREAD_NOT_FOUND")

	if _, err := Dial("sidecar.internal:7421", &Options{Token: s.writer}); err == nil || !strings.Contains(err.Error(), "only over TLS or a local connection") {
		t.Errorf("a token to a plaintext remote address: %v", err)
	}
	for addr, local := range map[string]bool{"unix:/x.sock": true, "127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "10.1.2.3:1": false, "example.com:1": false} {
		if isLocalAddress(addr) != local {
			t.Errorf("isLocalAddress(%q) != %v", addr, local)
		}
	}
}

func TestMutualTLS(t *testing.T) {
	proc, err := newSidecar()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.cleanup)
	pki := filepath.Join(proc.dir, "pki")
	if out, err := exec.Command(sidecarPython(), filepath.Join(repoRoot(), "tests", "certs.py"), pki, "agent-go").CombinedOutput(); err != nil {
		t.Fatalf("certs.py: %v\n%s", err, out)
	}
	authFile := filepath.Join(proc.dir, "auth.toml")
	entry := "[[client_cert]]\nsubject = \"O=Agent State Tests,CN=agent-go\"\nrole = \"write\"\nnamespaces = [\"team-go\"]\n"
	if err := os.WriteFile(authFile, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freeTCPPort(t)
	tcp := fmt.Sprintf("127.0.0.1:%d", port)
	proc.extra = []string{tcp}
	proc.args = []string{"--auth-file", authFile, "--tls-cert", filepath.Join(pki, "server.pem"), "--tls-key", filepath.Join(pki, "server.key"), "--tls-client-ca", filepath.Join(pki, "ca.pem")}
	if err := proc.start(); err != nil {
		t.Fatal(err)
	}
	s := &authSidecar{pki: pki}
	cfg := s.tlsConfig(t)
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "agent-go.pem"), filepath.Join(pki, "agent-go.key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(tcp, &Options{Namespace: "team-go", TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.PutCheckpoint(ctx, "t-mtls", map[string]any{"n": int64(2)}, nil); err != nil {
		t.Fatalf("the certificate's entry allows writes in team-go: %v", err)
	}
	other, err := Dial(tcp, &Options{Namespace: "elsewhere", TLS: cfg, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var e *Error
	if _, err := other.GetThread(ctx, "t-mtls"); !errors.As(err, &e) || e.Reason != "NAMESPACE_DENIED" {
		t.Errorf("another namespace: %v", err)
	}
}
