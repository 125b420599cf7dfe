package realkafka

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// dataBase is the directory under which every cluster gets a directory of its own: one place for
// the reaper to look. Tests of the reaper point it elsewhere.
var dataBase = filepath.Join(os.TempDir(), "goneli-realkafka")

// ownerFile, in a cluster's directory, stamps the test binary that started the cluster.
const ownerFile = "owner"

// pidFileName is the stamp of a node's JVM in the node's directory; formatPidFile that of the
// storage tool's.
const (
	pidFileName   = "pid"
	formatPidFile = "format.pid"
)

// unownedGrace is how long a cluster directory may be without an owner stamp before the reaper
// takes it for abandoned: its creator writes the stamp right after making it.
const unownedGrace = time.Minute

var reapOnce sync.Once

// reapStale runs the reaper once per process, before its first cluster starts.
func reapStale() {
	reapOnce.Do(func() {
		if killed, err := reap(dataBase); err != nil {
			fmt.Fprintf(os.Stderr, "realkafka: reaping stale clusters in %s: %v\n", dataBase, err)
		} else if len(killed) > 0 {
			fmt.Fprintf(os.Stderr, "realkafka: killed %d JVM(s) left by an earlier test run that was killed: pids %v\n", len(killed), killed)
		}
	})
}

// reap kills the JVMs of every cluster directory under base whose owner no longer runs, removes
// those directories, and returns the pids it killed. A JVM is killed only if its stamp matches it
// (pid and start time) and its command line names the directory, so that a pid the kernel has
// given to another process since is left alone.
func reap(base string) ([]int, error) {
	entries, err := os.ReadDir(base)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var killed []int
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(base, e.Name())
		owner, start, err := readStamp(filepath.Join(dir, ownerFile))
		if err != nil {
			fi, serr := os.Stat(dir)
			if serr != nil || time.Since(fi.ModTime()) < unownedGrace {
				continue
			}
		} else if alive(owner, start) {
			continue
		}
		stamps, _ := filepath.Glob(filepath.Join(dir, "*", pidFileName))
		stamps = append(stamps, filepath.Join(dir, formatPidFile))
		for _, s := range stamps {
			pid, st, err := readStamp(s)
			if err != nil || !alive(pid, st) || !cmdlineHas(pid, dir) {
				continue
			}
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !awaitExit(pid, st, 30*time.Second) {
				return killed, fmt.Errorf("pid %d (stamped in %s) survived SIGKILL for 30 s", pid, s)
			}
			killed = append(killed, pid)
		}
		if err := os.RemoveAll(dir); err != nil && !strings.Contains(err.Error(), "no such file") {
			return killed, err
		}
	}
	return killed, nil
}
