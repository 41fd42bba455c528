package agentstate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// sidecarProc is a `sidecar serve` child process (the Python server of this repo).
type sidecarProc struct {
	dir     string
	socket  string
	address string
	extra   []string // extra --listen addresses
	args    []string // extra `sidecar serve` arguments
	cmd     *exec.Cmd
}

func sidecarPython() string {
	if p := os.Getenv("SIDECAR_PYTHON"); p != "" {
		return p
	}
	venv := filepath.Join(repoRoot(), ".venv", "bin", "python")
	if _, err := os.Stat(venv); err == nil {
		return venv
	}
	return "python3"
}

func newSidecar() (*sidecarProc, error) {
	dir, err := os.MkdirTemp("", "agentstate-go-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "data", "sidecar.sock")
	return &sidecarProc{dir: dir, socket: sock, address: "unix:" + sock}, nil
}

func (s *sidecarProc) spawn() error {
	log, err := os.OpenFile(filepath.Join(s.dir, "sidecar.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	args := []string{"-m", "sidecar", "serve", "--data-dir", filepath.Join(s.dir, "data"), "--listen", s.address, "--grace", "2"}
	for _, a := range s.extra {
		args = append(args, "--listen", a)
	}
	args = append(args, s.args...)
	s.cmd = exec.Command(sidecarPython(), args...)
	s.cmd.Dir = repoRoot()
	// If the test binary dies (a panic, a timeout), the sidecar goes with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	return s.cmd.Start()
}

func (s *sidecarProc) start() error {
	if err := s.spawn(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(s.socket); err == nil {
			conn, err := grpc.NewClient(s.address, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
				cancel()
				conn.Close()
				if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
					return nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "sidecar.log"))
	return fmt.Errorf("sidecar did not start:\n%s", log)
}

// kill is a crash: SIGKILL, no cleanup.
func (s *sidecarProc) kill() {
	if s.cmd != nil && s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

func (s *sidecarProc) stop() {
	if s.cmd != nil && s.cmd.Process != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
	}
}

func (s *sidecarProc) cleanup() {
	s.stop()
	os.RemoveAll(s.dir)
}

// testAddress is the sidecar every API test uses: $AGENTSTATE_ADDRESS, or one started by TestMain.
var testAddress string

func TestMain(m *testing.M) {
	testAddress = os.Getenv("AGENTSTATE_ADDRESS")
	var sc *sidecarProc
	if testAddress == "" {
		var err error
		if sc, err = newSidecar(); err == nil {
			err = sc.start()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cannot start a sidecar:", err)
			os.Exit(1)
		}
		testAddress = sc.address
	}
	code := m.Run()
	if sc != nil {
		sc.cleanup()
	}
	os.Exit(code)
}
