package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli/metrics"
	"go.yaml.in/yaml/v3"
)

// The examples that run neli under a supervisor, from this package's directory. The Kubernetes
// manifests are also decoded into the Kubernetes API types, strictly, by the tests of their own
// module (examples/kubernetes), which keeps the Kubernetes modules out of this one.
const (
	systemdUnit    = "../../examples/systemd/neli-run@.service"
	kubernetesNeli = "../../examples/kubernetes/neli-run.yaml"
)

// TestDeployExamples checks the examples against neli itself: their command lines parse as neli
// run's flags, and the time their supervisor gives neli to stop exceeds neli's stop bound for those
// flags; on Kubernetes, the probes reach --metrics-addr from outside the pod, and readiness turns
// before a leader that cannot renew hands leadership over.
func TestDeployExamples(t *testing.T) {
	t.Run("systemd", testSystemdUnit)
	t.Run("kubernetes", testKubernetesManifest)
}

func testSystemdUnit(t *testing.T) {
	unit, err := readUnit(systemdUnit)
	if err != nil {
		t.Fatal(err)
	}
	service := unit["Service"]
	if got := service["KillSignal"]; len(got) != 1 || got[0] != "SIGTERM" {
		t.Errorf("KillSignal %q, want SIGTERM: neli hands leadership over on SIGTERM or SIGINT", got)
	}
	if got := service["KillMode"]; len(got) != 1 || got[0] != "mixed" {
		t.Errorf("KillMode %q, want mixed: neli must stop its command itself, before it hands leadership over", got)
	}

	// What /etc/neli/GROUP.env would add: the command, here one that exists on this machine.
	env := map[string]string{"COMMAND": "true"}
	for _, kv := range service["Environment"] {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if len(service["ExecStart"]) != 1 {
		t.Fatalf("ExecStart %q, want one", service["ExecStart"])
	}
	argv, err := execArgs(service["ExecStart"][0], "report-exporter", env)
	if err != nil {
		t.Fatal(err)
	}
	o := parseNeliRun(t, argv)
	if o.metricsAddr == "" {
		t.Errorf("ExecStart %q serves no metrics", argv)
	}

	stop := stopBoundOf(t, o)
	if len(service["TimeoutStopSec"]) != 1 {
		t.Fatalf("TimeoutStopSec %q, want one", service["TimeoutStopSec"])
	}
	timeout, err := systemdSpan(service["TimeoutStopSec"][0])
	if err != nil {
		t.Fatal(err)
	}
	if timeout <= stop {
		t.Errorf("TimeoutStopSec %v: want more than neli's stop bound for %q, %v", timeout, argv[2:], stop)
	}
}

// parseNeliRun parses argv, neli and its arguments, as neli run's.
func parseNeliRun(t *testing.T, argv []string) runOptions {
	t.Helper()
	if len(argv) < 2 || !strings.HasSuffix(argv[0], "/neli") || argv[1] != "run" {
		t.Fatalf("%q is not neli run", argv)
	}
	o, err := parseRun(argv[2:], io.Discard)
	if err != nil {
		t.Fatalf("neli run %q: %v", argv[2:], err)
	}
	return o
}

func stopBoundOf(t *testing.T, o runOptions) time.Duration {
	t.Helper()
	bound, err := o.stopBound(o.runConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	// The numbers the examples' comments give.
	if o.grace == 10*time.Second && o.heartbeatTimeout == 5*time.Second && o.handOverAfter == 0 && bound != 31*time.Second {
		t.Errorf("stop bound %v at --grace 10s and a 5 s lease; the examples say 31 s", bound)
	}
	return bound
}

// readUnit reads a systemd unit file: each section's keys, with every value given, in order.
func readUnit(path string) (map[string]map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	unit := map[string]map[string][]string{}
	var section map[string][]string
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasSuffix(line, "\\"):
			return nil, fmt.Errorf("%s:%d: a continued line, which this test does not read", path, n)
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = map[string][]string{}
			unit[line[1:len(line)-1]] = section
		case section == nil:
			return nil, fmt.Errorf("%s:%d: a setting before the first section", path, n)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("%s:%d: %q is no key=value", path, n, line)
			}
			section[strings.TrimSpace(k)] = append(section[strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return unit, s.Err()
}

// execArgs splits an ExecStart command line into words as systemd does for the forms the example
// uses: %i is the instance name, ${VAR} stands for one word and a word $VAR for the words of VAR's
// value. Quotes and other specifiers are refused rather than read wrong.
func execArgs(line, instance string, env map[string]string) ([]string, error) {
	if strings.ContainsAny(line, `"'\`) {
		return nil, fmt.Errorf("ExecStart %q: quotes and escapes are not read by this test", line)
	}
	var argv []string
	for _, w := range strings.Fields(line) {
		w = strings.ReplaceAll(w, "%i", instance)
		if strings.Contains(w, "%") {
			return nil, fmt.Errorf("ExecStart word %q: a specifier other than %%i", w)
		}
		if name, ok := strings.CutPrefix(w, "$"); ok && !strings.HasPrefix(name, "{") {
			argv = append(argv, strings.Fields(env[name])...)
			continue
		}
		for {
			i := strings.Index(w, "${")
			if i < 0 {
				break
			}
			j := strings.Index(w[i:], "}")
			if j < 0 {
				return nil, fmt.Errorf("ExecStart word %q: an unclosed ${", w)
			}
			w = w[:i] + env[w[i+2:i+j]] + w[i+j+1:]
		}
		argv = append(argv, w)
	}
	return argv, nil
}

// systemdSpan reads a systemd time span of the forms "45", "45s", "2min" or "1min 30s".
func systemdSpan(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(v, " ", ""), "min", "m"))
	if err != nil {
		return 0, fmt.Errorf("time span %q: %v", v, err)
	}
	return d, nil
}

// The parts of a Deployment that concern neli, as far as this test reads them.
type deployment struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Template struct {
			Spec struct {
				TerminationGracePeriodSeconds *int64      `yaml:"terminationGracePeriodSeconds"`
				Containers                    []container `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type probe struct {
	HTTPGet *struct {
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

func testKubernetesManifest(t *testing.T) {
	f, err := os.Open(kubernetesNeli)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d *deployment
	for dec := yaml.NewDecoder(f); ; {
		var doc deployment
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if doc.Kind == "Deployment" {
			d = &doc
		}
	}
	if d == nil || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want a Deployment of one container", kubernetesNeli)
	}
	c := d.Spec.Template.Spec.Containers[0]
	argv := append(append([]string{}, c.Command...), c.Args...)
	for i, a := range argv {
		if a == "--" && i+1 < len(argv) {
			// The image's command, which this machine does not have.
			argv = append(argv[:i+1], "true")
			break
		}
	}
	o := parseNeliRun(t, argv)

	stop := stopBoundOf(t, o)
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= stop {
		t.Errorf("terminationGracePeriodSeconds %s: want more than neli's stop bound for %q, %v", secondsOf(grace), argv[2:], stop)
	}

	host, port, err := net.SplitHostPort(o.metricsAddr)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v", o.metricsAddr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("--metrics-addr %s: the kubelet probes the pod's IP, not %s", o.metricsAddr, host)
	}
	for what, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("container %s has no httpGet %s probe", c.Name, what)
			continue
		}
		found := false
		for _, cp := range c.Ports {
			found = found || (cp.Name == p.HTTPGet.Port && strconv.Itoa(cp.ContainerPort) == port)
		}
		if !found {
			t.Errorf("the %s probe's port %q is not the container port of --metrics-addr, %s", what, p.HTTPGet.Port, port)
		}
	}

	// Readiness turns at most a tolerance and failureThreshold periods after the problem begins,
	// which must be before an owner that cannot renew hands leadership over.
	if r := c.ReadinessProbe; r != nil {
		period, failures := time.Duration(r.PeriodSeconds)*time.Second, time.Duration(r.FailureThreshold)
		if period == 0 {
			period = 10 * time.Second // the API's defaults
		}
		if failures == 0 {
			failures = 3
		}
		handOver := o.handOverAfter
		if handOver == 0 {
			handOver = o.heartbeatTimeout
		}
		if detect := metrics.DefaultTolerance + period*failures; detect >= handOver {
			t.Errorf("readiness notices a leader that cannot renew after up to %v, not before it hands over (%v)", detect, handOver)
		}
	}
}

// secondsOf renders an optional count of seconds.
func secondsOf(s *int64) string {
	if s == nil {
		return "unset (30 s)"
	}
	return strconv.FormatInt(*s, 10) + " s"
}
