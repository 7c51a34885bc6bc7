package chart_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestProbesAnswer runs each workload the chart renders as its pod would
// run it, with the binary, the arguments, the variables (secrets and the
// pod's name filled in) and the files of its ConfigMaps, every port moved
// to a free loopback port, and wants each readiness and liveness probe to
// succeed against it: the probes ask what sluice really serves.
func TestProbesAnswer(t *testing.T) {
	c := loadChart(t)
	manifest, err := render(t, c, map[string]any{
		"secrets":  map[string]any{"balancerToken": token},
		"gateway":  map[string]any{"rules": "rules:\n  - scope: default\n    limits: [{name: s, rate: 10, per: 1s}]\n"},
		"rls":      map[string]any{"enabled": true},
		"balancer": map[string]any{"enabled": true, "regions": []any{"us", "eu"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, manifest)
	secret := map[string]string{}
	for _, s := range r.secrets {
		for k, v := range s.StringData {
			secret[k] = v
		}
	}
	configMaps := map[string]map[string]string{}
	for _, cm := range r.configMaps {
		configMaps[cm.Name] = cm.Data
	}
	if len(r.deployments) != 3 {
		t.Fatalf("%d deployments, want the gateway, rls and the balancer", len(r.deployments))
	}
	for _, d := range r.deployments {
		t.Run(d.Name, func(t *testing.T) {
			pod := d.Spec.Template.Spec
			ctr := pod.Containers[0]
			// Volumes: each mount becomes a directory, a ConfigMap's
			// files written into it.
			mounts := map[string]string{} // mount path: local directory
			for _, vm := range ctr.VolumeMounts {
				dir := t.TempDir()
				for _, v := range pod.Volumes {
					if v.Name == vm.Name && v.ConfigMap != nil {
						for file, text := range configMaps[v.ConfigMap.Name] {
							if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				mounts[vm.MountPath] = dir
			}
			// Ports: each declared port gets a free loopback port.
			local := map[int32]string{} // container port: local address
			named := map[string]int32{}
			for _, p := range ctr.Ports {
				local[p.ContainerPort] = freeAddr(t)
				named[p.Name] = p.ContainerPort
			}
			env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			for _, e := range ctr.Env {
				v := e.Value
				switch {
				case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
					var ok bool
					if v, ok = secret[e.ValueFrom.SecretKeyRef.Key]; !ok {
						continue // optional, and absent
					}
				case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
					v = d.Name + "-0"
				case strings.HasSuffix(e.Name, "LISTEN"):
					_, port, _ := strings.Cut(v, ":")
					v = local[int32(atoi(t, port))]
				}
				for path, dir := range mounts {
					if rest, ok := strings.CutPrefix(v, path); ok {
						v = dir + rest
					}
				}
				env = append(env, e.Name+"="+v)
			}
			cmd := exec.Command(sluiceBin, ctr.Args...)
			cmd.Env = env
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-done
				if t.Failed() {
					t.Logf("sluice %s:\n%s", strings.Join(ctr.Args, " "), out.String())
				}
			})
			for kind, p := range map[string]*corev1.Probe{"readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
				if err := waitProbe(p, local, named, done); err != nil {
					t.Errorf("%s probe: %v", kind, err)
				}
			}
		})
	}
}

// waitProbe tries a probe for up to 20 seconds, as the kubelet would,
// until it succeeds or the process exits.
func waitProbe(p *corev1.Probe, local map[int32]string, named map[string]int32, exited <-chan struct{}) error {
	port := func(name string, num int32) string {
		if name != "" {
			num = named[name]
		}
		return local[num]
	}
	var try func() error
	switch {
	case p.HTTPGet != nil:
		url := "http://" + port(p.HTTPGet.Port.StrVal, p.HTTPGet.Port.IntVal) + p.HTTPGet.Path
		try = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode < 200 || resp.StatusCode >= 400 {
				return fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			return nil
		}
	case p.TCPSocket != nil:
		try = func() error { return dial(port(p.TCPSocket.Port.StrVal, p.TCPSocket.Port.IntVal)) }
	case p.GRPC != nil:
		// The port answers; rls_test in the main module covers what
		// its gRPC health service says.
		try = func() error { return dial(port("", p.GRPC.Port)) }
	default:
		return fmt.Errorf("a probe of no known kind")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the process exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
