package deploy_test

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// instruction is one line of a Dockerfile, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// stage is a Dockerfile's build stage: its FROM arguments and the
// instructions after it.
type stage struct {
	from  string
	name  string // after AS, if any
	instr []instruction
}

// parseDockerfile reads the stages of a Dockerfile and the ARGs declared
// before the first FROM, with their defaults.
func parseDockerfile(t *testing.T, text string) (globalArgs map[string]string, stages []stage) {
	t.Helper()
	globalArgs = map[string]string{}
	text = strings.ReplaceAll(text, "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			s := stage{}
			for i := 0; i < len(f); i++ {
				switch {
				case strings.HasPrefix(f[i], "--"):
				case strings.EqualFold(f[i], "AS") && i+1 < len(f):
					s.name = f[i+1]
					i++
				default:
					s.from = f[i]
				}
			}
			stages = append(stages, s)
		case len(stages) == 0 && in.cmd == "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			globalArgs[name] = def
		case len(stages) == 0:
			t.Fatalf("Dockerfile: %s before the first FROM", in.cmd)
		default:
			stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
		}
	}
	return globalArgs, stages
}

// TestDockerfile checks the image's shape, as no Docker daemon runs here:
// a build stage with the Go of go.mod's toolchain line, a static build
// that stamps the version, and a final stage on a base with no shell, run
// as an unprivileged user, starting the binary without a shell. Then it
// runs the build stage's go build command as written, with the target
// and version filled in, and checks the binary is static and prints the
// stamped version.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	args, stages := parseDockerfile(t, readFile(t, "../Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a final one", len(stages))
	}
	build, final := stages[0], stages[1]

	toolchain := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindStringSubmatch(readFile(t, "../go.mod"))
	if toolchain == nil || args["GO_VERSION"] != toolchain[1] {
		t.Errorf("Dockerfile builds with Go %q, want go.mod's toolchain %v", args["GO_VERSION"], toolchain)
	}
	if build.name == "" || !strings.HasPrefix(build.from, "golang:") {
		t.Errorf("the first stage is FROM %s AS %q, want a named stage from the golang image", build.from, build.name)
	}
	var goBuild string
	for _, in := range build.instr {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-X main.version=${VERSION}", "-X main.revision=${REVISION}", "./cmd/sluice"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("the build stage's go build %q lacks %q", goBuild, want)
		}
	}

	if final.from != "scratch" && !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("the final stage is FROM %s, want scratch or distroless static: no shell, no libc", final.from)
	}
	var user, entrypoint string
	var copied []string
	for _, in := range final.instr {
		switch in.cmd {
		case "RUN":
			t.Errorf("the final stage runs %q: it has no shell to run it", in.args)
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			if f := strings.Fields(in.args); len(f) == 3 && f[0] == "--from="+build.name {
				copied = append(copied, f[2])
			}
		}
	}
	if !regexp.MustCompile(`^[1-9][0-9]*(:[1-9][0-9]*)?$`).MatchString(user) {
		t.Errorf("the final stage's USER is %q, want a numeric user other than root, so runAsNonRoot can check it", user)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) == 0 {
		t.Errorf("ENTRYPOINT %s is not in exec form (a JSON array): the shell form needs a shell", entrypoint)
	} else if len(copied) != 1 || ep[0] != copied[0] {
		t.Errorf("ENTRYPOINT runs %q, want the binary copied from the build stage (%q)", ep[0], copied)
	}

	// The build command as the Dockerfile runs it, writing into a
	// temporary directory instead of /out.
	out := t.TempDir()
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(goBuild, "/out/", out+"/"))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-docker-test", "REVISION=feedface",
		"TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", goBuild, err, b)
	}
	bin := filepath.Join(out, "sluice")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is not static", p.Type)
		}
	}
	got, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(got), "sluice v0.0.0-docker-test (revision feedface, ") {
		t.Errorf("the image's binary prints %q (%v), want the stamped version and revision", got, err)
	}
}
