package realkafka

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pom names the broker's artifacts; its kafka.version property is the version the tests run unless
// GONELI_KAFKA_VERSION says otherwise.
//
//go:embed pom.xml
var pom []byte

// DefaultVersion is the Kafka version of pom.xml.
var DefaultVersion = func() string {
	var p struct {
		Version string `xml:"properties>kafka.version"`
	}
	if err := xml.Unmarshal(pom, &p); err != nil || p.Version == "" {
		panic(fmt.Sprintf("realkafka: pom.xml has no properties/kafka.version (%v)", err))
	}
	return p.Version
}()

// missing is a tool or setting the machine lacks: the tests skip for it, unless
// GONELI_REAL_KAFKA=require.
type missing struct{ msg string }

func (m *missing) Error() string { return m.msg }

// installHint ends every message about a missing tool.
const installHint = "or point KAFKA_BOOTSTRAP=host:port at a running cluster"

// install is a Kafka version's jars, fetched.
type install struct {
	version string
	lib     string // the directory of the jars
	// fetched is how long mvn took, zero if the cache had the jars already.
	fetched time.Duration
	jars    int
	bytes   int64
}

// classpath is the JVM's -cp for the install.
func (in *install) classpath() string { return filepath.Join(in.lib, "*") }

var installs struct {
	sync.Mutex
	byVersion map[string]*install
}

// provision returns the jars of version, fetching them with mvn into the cache the first time.
func provision(version string) (*install, error) {
	installs.Lock()
	defer installs.Unlock()
	if in := installs.byVersion[version]; in != nil {
		return in, nil
	}
	in, err := fetch(version)
	if err != nil {
		return nil, err
	}
	if installs.byVersion == nil {
		installs.byVersion = map[string]*install{}
	}
	installs.byVersion[version] = in
	return in, nil
}

// cacheRoot is where versions are kept: $GONELI_KAFKA_CACHE, else goneli/kafka in the user's cache
// directory (~/.cache on Linux).
func cacheRoot() (string, error) {
	if d := os.Getenv("GONELI_KAFKA_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for Kafka's jars (%v): set GONELI_KAFKA_CACHE", err)
	}
	return filepath.Join(d, "goneli", "kafka"), nil
}

// cacheKey names a version's directory: the version and a digest of the POM, so that a change to
// the POM (another binding, another plugin) fetches afresh rather than reusing jars it did not name.
func cacheKey(version string) string {
	sum := sha256.Sum256(pom)
	return version + "-" + hex.EncodeToString(sum[:4])
}

// completeFile is written last into a version's directory: its presence says the jars are whole.
const completeFile = "complete"

func fetch(version string) (*install, error) {
	root, err := cacheRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	dir := filepath.Join(root, cacheKey(version))
	// Test binaries of several packages start at once (go test runs packages in parallel): one
	// fetches, the others wait for it and then find the jars.
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in, err := readInstall(version, dir); err == nil {
		return in, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return nil, &missing{fmt.Sprintf("real Kafka %s is not in the cache (%s) and there is no mvn to fetch it: "+
			"install Maven (Debian: apt-get install maven) and Java 17 or later, %s", version, dir, installHint)}
	}
	tmp, err := os.MkdirTemp(root, cacheKey(version)+".fetch-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "pom.xml"), pom, 0o644); err != nil {
		return nil, err
	}
	lib := filepath.Join(tmp, "lib")
	start := time.Now()
	// A Maven repository of its own, thrown away afterwards: the cache then holds the jars once,
	// and the user's ~/.m2 is left as it was. settings.xml (mirrors, proxies) applies as usual.
	cmd := exec.Command(mvn, "-B", "-ntp", "-f", filepath.Join(tmp, "pom.xml"),
		"-Dmaven.repo.local="+filepath.Join(tmp, "repository"),
		"-Dkafka.version="+version,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+lib)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("fetching Kafka %s with mvn failed after %v (%v); its last lines:\n%s",
			version, took.Round(time.Millisecond), err, lastLines(out, 25))
	}
	if _, err := os.Stat(filepath.Join(lib, "kafka_2.13-"+version+".jar")); err != nil {
		return nil, fmt.Errorf("mvn fetched no kafka_2.13-%s.jar into %s; its last lines:\n%s", version, lib, lastLines(out, 25))
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(lib, filepath.Join(dir, "lib")); err != nil {
		return nil, err
	}
	jars, err := listJars(filepath.Join(dir, "lib"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, completeFile), []byte(strings.Join(jars, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	in, err := readInstall(version, dir)
	if err != nil {
		return nil, err
	}
	in.fetched = took
	return in, nil
}

// readInstall returns the install in dir if it is complete.
func readInstall(version, dir string) (*install, error) {
	listed, err := os.ReadFile(filepath.Join(dir, completeFile))
	if err != nil {
		return nil, err
	}
	in := &install{version: version, lib: filepath.Join(dir, "lib")}
	for _, name := range strings.Fields(string(listed)) {
		fi, err := os.Stat(filepath.Join(in.lib, name))
		if err != nil {
			return nil, fmt.Errorf("the cache at %s lacks %s: %w", dir, name, err)
		}
		in.jars++
		in.bytes += fi.Size()
	}
	if in.jars == 0 {
		return nil, fmt.Errorf("the cache at %s lists no jars", dir)
	}
	return in, nil
}

func listJars(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".jar") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// lockFile takes an exclusive lock on path, waiting for it, and returns its release. The kernel
// drops the lock of a process that dies.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// javaInfo is the java on PATH and its feature version (17 for 17.0.15, 8 for 1.8.0).
type javaInfo struct {
	path    string
	feature int
}

var javaOnce struct {
	sync.Once
	info javaInfo
	err  error
}

var javaVersionRE = regexp.MustCompile(`version "(\d+)(?:\.(\d+))?`)

// findJava is lookJava, once per process.
func findJava() (javaInfo, error) {
	javaOnce.Do(func() { javaOnce.info, javaOnce.err = lookJava() })
	return javaOnce.info, javaOnce.err
}

// lookJava finds java and reads its version. $JAVA_HOME/bin/java comes first, as in the scripts
// that ship with Kafka.
func lookJava() (javaInfo, error) {
	path := ""
	if home := os.Getenv("JAVA_HOME"); home != "" {
		if _, err := os.Stat(filepath.Join(home, "bin", "java")); err == nil {
			path = filepath.Join(home, "bin", "java")
		}
	}
	if path == "" {
		p, err := exec.LookPath("java")
		if err != nil {
			return javaInfo{}, &missing{"real Kafka needs java and there is none on PATH: " +
				"install Java 17 or later (Debian: apt-get install openjdk-17-jre-headless) and Maven (apt-get install maven), " + installHint}
		}
		path = p
	}
	out, err := exec.Command(path, "-version").CombinedOutput()
	if err != nil {
		return javaInfo{}, fmt.Errorf("%s -version: %v: %s", path, err, bytes.TrimSpace(out))
	}
	m := javaVersionRE.FindSubmatch(out)
	if m == nil {
		return javaInfo{}, fmt.Errorf("%s -version: no version in %q", path, bytes.TrimSpace(out))
	}
	feature, _ := strconv.Atoi(string(m[1]))
	if feature == 1 && len(m[2]) > 0 {
		feature, _ = strconv.Atoi(string(m[2])) // 1.8.0: Java 8
	}
	return javaInfo{path: path, feature: feature}, nil
}

// needJava is the least Java feature version that Kafka version needs: 17 from 4.0 on, 11 before.
func needJava(version string) int {
	if major(version) >= 4 {
		return 17
	}
	return 11
}

// major is the major version of a Kafka version string, 0 if it has none.
func major(version string) int {
	n, _ := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	return n
}

// checkJava returns a *missing error if java is absent or older than version needs.
func checkJava(version string) (javaInfo, error) {
	j, err := findJava()
	if err != nil {
		return j, err
	}
	if need := needJava(version); j.feature < need {
		return j, &missing{fmt.Sprintf("real Kafka %s needs Java %d or later and %s is Java %d: install a newer one "+
			"(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME to it, %s", version, need, j.path, j.feature, installHint)}
	}
	return j, nil
}
