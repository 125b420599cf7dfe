package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goneli/goneli"
	"github.com/goneli/goneli/metrics"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// manifest is what a file of this directory holds, each object decoded into its API type.
type manifest struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	budgets     []*policyv1.PodDisruptionBudget
}

// decode reads every document of data into the API type its apiVersion and kind name. A field the
// type does not have, a duplicate field or an unknown kind is an error: the API server would drop
// an unknown field silently (or refuse it, with server-side field validation), so a misspelled
// probe setting would otherwise go unnoticed.
func decode(data []byte) (manifest, error) {
	var m manifest
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return m, err
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			m.deployments, obj = append(m.deployments, d), d
		case "v1 Service":
			s := &corev1.Service{}
			m.services, obj = append(m.services, s), s
		case "policy/v1 PodDisruptionBudget":
			b := &policyv1.PodDisruptionBudget{}
			m.budgets, obj = append(m.budgets, b), b
		case " ":
			continue // an empty document, as after a trailing ---
		default:
			return m, &kindError{i, meta.APIVersion, meta.Kind}
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return m, &docError{i, meta.Kind, err}
		}
	}
}

type kindError struct {
	doc              int
	apiVersion, kind string
}

func (e *kindError) Error() string {
	return "document " + strconv.Itoa(e.doc) + ": apiVersion " + e.apiVersion + " kind " + e.kind + " is none that these examples use"
}

type docError struct {
	doc  int
	kind string
	err  error
}

func (e *docError) Error() string {
	return "document " + strconv.Itoa(e.doc) + " (" + e.kind + "): " + e.err.Error()
}

func read(t *testing.T, file string) manifest {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decode(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(m.deployments) != 1 || len(m.budgets) != 1 {
		t.Fatalf("%s: %d Deployments and %d PodDisruptionBudgets, want one of each", file, len(m.deployments), len(m.budgets))
	}
	return m
}

func TestDecodingIsStrict(t *testing.T) {
	data, err := os.ReadFile("service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"terminationGracePeriodSeconds:", "terminationGracePeriodSecond:", `unknown field "terminationGracePeriodSecond"`},
		{"  periodSeconds: 1\n", "  periodSeconds: 1\n            periodSeconds: 2\n", `"periodSeconds" already set`},
		{"kind: PodDisruptionBudget", "kind: PodDisruptionBudgets", "kind PodDisruptionBudgets is none"},
	} {
		bad := bytes.Replace(data, []byte(tc.from), []byte(tc.to), 1)
		if bytes.Equal(bad, data) {
			t.Fatalf("service.yaml has no %q to change", tc.from)
		}
		if _, err := decode(bad); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("service.yaml with %q for %q: %v, want an error saying %s", tc.to, tc.from, err, tc.want)
		}
	}
}

// selects reports whether selector picks every pod of d.
func selects(t *testing.T, what string, selector *metav1.LabelSelector, d *appsv1.Deployment) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if s.Empty() || !s.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s selects %v, which the pods of Deployment %s (labels %v) do not match", what, s, d.Name, d.Spec.Template.Labels)
	}
}

// checkDeployment checks what every Deployment here must do for a group of contenders, and returns
// its container named container.
func checkDeployment(t *testing.T, m manifest, container string) *corev1.Container {
	t.Helper()
	d := m.deployments[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("Deployment %s: replicas %v, want 3", d.Name, d.Spec.Replicas)
	}
	selects(t, "Deployment "+d.Name+"'s selector", d.Spec.Selector, d)
	selects(t, "PodDisruptionBudget "+m.budgets[0].Name, m.budgets[0].Spec.Selector, d)
	for _, s := range m.services {
		sel := &metav1.LabelSelector{MatchLabels: s.Spec.Selector}
		selects(t, "Service "+s.Name, sel, d)
	}

	// A rollout that stops an old member only once a new one is Ready keeps the group at full
	// strength, and a new version that cannot join stops the rollout.
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil ||
		ru.MaxUnavailable.String() != "0" {
		t.Errorf("Deployment %s: strategy %+v, want RollingUpdate with maxUnavailable 0", d.Name, d.Spec.Strategy)
	}
	// Voluntary disruptions take one member at a time, and leave at least two.
	pdb := m.budgets[0].Spec
	if pdb.MaxUnavailable == nil || pdb.MaxUnavailable.String() != "1" || pdb.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, minAvailable %v; want maxUnavailable 1 alone",
			m.budgets[0].Name, pdb.MaxUnavailable, pdb.MinAvailable)
	}

	var c *corev1.Container
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == container {
			c = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatalf("Deployment %s has no container %s", d.Name, container)
	}
	return c
}

// probePort is the container port that the probe's httpGet names, by name or by number.
func probePort(t *testing.T, c *corev1.Container, what string, p *corev1.Probe) int32 {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Fatalf("container %s: no httpGet %s probe", c.Name, what)
	}
	for _, port := range c.Ports {
		if (p.HTTPGet.Port.Type == intstr.String && p.HTTPGet.Port.StrVal == port.Name) ||
			(p.HTTPGet.Port.Type == intstr.Int && p.HTTPGet.Port.IntVal == port.ContainerPort) {
			return port.ContainerPort
		}
	}
	t.Fatalf("container %s: the %s probe's port %s is none of its ports", c.Name, what, p.HTTPGet.Port.String())
	return 0
}

// orDefault is a probe setting, or the API's default for it when it is left out.
func orDefault(v, def int32) time.Duration {
	if v == 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

// checkProbes checks that readiness follows /healthz closely enough that a member that owns the
// partition but cannot renew is taken out of the Service before it hands over (handOver), and that
// liveness answers in every state in which a restart would not help, through the handler that
// serves both (the one the program or neli serves, on a Curator whose Stats are set by hand).
func checkProbes(t *testing.T, c *corev1.Container, handOver time.Duration, serve func(goneli.Curator) http.Handler) {
	t.Helper()
	ready, live := c.ReadinessProbe, c.LivenessProbe
	probePort(t, c, "readiness", ready)
	probePort(t, c, "liveness", live)
	if ready.HTTPGet.Path != "/healthz" {
		t.Errorf("container %s: readiness on %s, want /healthz", c.Name, ready.HTTPGet.Path)
	}
	// The worst case: the problem begins just after a probe, /healthz turns after the tolerance,
	// and each of failureThreshold probes a period apart must fail.
	failures := ready.FailureThreshold
	if failures == 0 {
		failures = 3 // the API's default
	}
	detect := metrics.DefaultTolerance + orDefault(ready.PeriodSeconds, 10)*time.Duration(failures)
	if detect >= handOver {
		t.Errorf("container %s: readiness notices a member that cannot renew after up to %v, not before it hands over (%v)", c.Name, detect, handOver)
	}

	m, err := goneli.NewMock(goneli.MockConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ago := 3 * metrics.DefaultTolerance
	for _, tc := range []struct {
		what        string
		curator     goneli.Curator
		ready, live bool
	}{
		{"a healthy follower", m, true, true},
		{"a follower that cannot reach Kafka", edited{m, func(s *goneli.Stats) {
			s.UnreachableSince, s.UnreachableReason = time.Now().Add(-ago), "every broker connection down"
		}}, false, true},
		{"a member that owns the partition but cannot renew", edited{m, func(s *goneli.Stats) {
			s.Assigned, s.NotLeadingSince = true, time.Now().Add(-ago)
		}}, false, true},
		{"a leader stuck past its lease", edited{m, func(s *goneli.Stats) {
			s.Assigned, s.LeaseOverdue = true, ago
		}}, false, false},
	} {
		h := serve(tc.curator)
		if got := probe(t, h, ready.HTTPGet.Path); got != tc.ready {
			t.Errorf("container %s, %s: readiness probe %s passes: %v, want %v", c.Name, tc.what, ready.HTTPGet.Path, got, tc.ready)
		}
		// A leader stuck past its lease may be restarted, but need not be: the watchdog fences it.
		if got := probe(t, h, live.HTTPGet.Path); tc.live && !got {
			t.Errorf("container %s, %s: liveness probe %s fails: it would be restarted", c.Name, tc.what, live.HTTPGet.Path)
		}
	}
}

// probe reports whether the kubelet would count a GET of path as a success: a status from 200 to
// 399.
func probe(t *testing.T, h http.Handler, path string) bool {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code >= 200 && rec.Code < 400
}

// edited is a Curator whose Stats are the mock's, changed by edit.
type edited struct {
	goneli.MockNeli
	edit func(*goneli.Stats)
}

func (c edited) Stats() goneli.Stats {
	s := c.MockNeli.Stats()
	c.edit(&s)
	return s
}

// TestServiceManifest checks service.yaml against this directory's program: its flags, its port,
// its handler and its stop bound.
func TestServiceManifest(t *testing.T) {
	m := read(t, "service.yaml")
	c := checkDeployment(t, m, "scheduler")
	if len(m.services) != 1 {
		t.Fatalf("service.yaml: %d Services, want 1", len(m.services))
	}
	o, err := parseOptions(c.Args, io.Discard)
	if err != nil {
		t.Fatalf("the container's args %q: %v", c.Args, err)
	}
	host, port, _ := net.SplitHostPort(o.listen)
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("-listen %s: the kubelet probes the pod's IP, not %s", o.listen, host)
	}
	if len(c.Ports) != 1 || strconv.Itoa(int(c.Ports[0].ContainerPort)) != port || c.Ports[0].Name != "http" {
		t.Errorf("container ports %+v, want one named http on %s, the -listen port", c.Ports, port)
	}
	if ports := m.services[0].Spec.Ports; len(ports) != 1 || ports[0].TargetPort.String() != "http" {
		t.Errorf("Service %s ports %+v, want one, targeting the container's port http", m.services[0].Name, ports)
	}

	config := o.config()
	handOver := *config.HeartbeatTimeout // Config.HandOverAfter's default
	if config.HandOverAfter != nil {
		handOver = *config.HandOverAfter
	}
	checkProbes(t, c, handOver, func(cur goneli.Curator) http.Handler {
		h, err := handler(cur, o.group)
		if err != nil {
			t.Fatal(err)
		}
		return h
	})

	bound, err := o.stopBound()
	if err != nil {
		t.Fatal(err)
	}
	closeBound, _ := config.CloseBound()
	if bound <= closeBound {
		t.Errorf("the program's stop bound %v does not cover Close's, %v", bound, closeBound)
	}
	grace := m.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= bound {
		t.Errorf("terminationGracePeriodSeconds %s: want more than the program's stop bound, %v", seconds(grace), bound)
	}
}

// seconds renders an optional count of seconds.
func seconds(s *int64) string {
	if s == nil {
		return "unset (30 s)"
	}
	return strconv.FormatInt(*s, 10) + " s"
}

// TestNeliRunManifest checks neli-run.yaml against goneli's metrics handler, which `neli run
// --metrics-addr` serves; cmd/neli's TestDeployExamples checks its flags, port and grace period
// against neli's own.
func TestNeliRunManifest(t *testing.T) {
	m := read(t, "neli-run.yaml")
	c := checkDeployment(t, m, "neli")
	if len(c.Command) == 0 || !strings.HasSuffix(c.Command[0], "/neli") || len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("container neli runs %q %q, want neli run", c.Command, c.Args)
	}
	// neli's default lease and hand-over bound; TestDeployExamples checks the flags that set them.
	checkProbes(t, c, goneli.DefaultHeartbeatTimeout, func(cur goneli.Curator) http.Handler {
		h, err := metrics.Handler(cur, nil)
		if err != nil {
			t.Fatal(err)
		}
		return h
	})
}
