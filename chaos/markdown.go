package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// RunInfo is what a Markdown report says of a run besides its figures: enough to replay it.
type RunInfo struct {
	Seed     uint64
	Commit   string   // the repository's commit, if known
	Settings []string // the run's CHAOS_* variables, KEY=value
	Date     time.Time
}

// reportTitle begins a page that CHAOS_REPORT starts; each run appends a section below it.
const reportTitle = "# Chaos results\n\n" +
	"<!-- Written by the chaos suite (CHAOS_REPORT=FILE); do not edit: run it again. Each run appends a section. -->\n\n" +
	"[chaos.md](chaos.md) says what the suite does and what the columns mean.\n"

// realReportTitle begins a page of runs on Apache Kafka (`make chaos-real`).
const realReportTitle = "# Chaos results on Apache Kafka\n\n" +
	"<!-- Written by the chaos suite (CHAOS_REPORT=FILE); do not edit: run it again. Each run appends a section. -->\n\n" +
	"The chaos suite against a KRaft cluster of Apache Kafka's own brokers (`make chaos-real`); " +
	"[chaos.md](chaos.md) says what the suite does and what the columns mean, and " +
	"[chaos-results.md](chaos-results.md) has the runs on the embedded broker.\n"

// Markdown writes the summary as a section of a Markdown page: the run, its figures, the faults by
// kind as a table and, with roles, each role's figures. It holds the same figures as Print.
func (s Summary) Markdown(w io.Writer, run RunInfo) {
	t := s.totals()
	roles := s.hasRoles()
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	title := "single leader"
	leaderOf := "leader"
	if roles {
		title = fmt.Sprintf("%d roles", len(t.roles))
		leaderOf = "leader of one role"
	}
	p("")
	p("## %s, %s, %d faults", title, s.brokersText(), t.faults)
	p("")
	commit := ""
	if run.Commit != "" {
		commit = fmt.Sprintf(" on commit %s", run.Commit)
	}
	p("Run %s%s: %d trial(s) in %v, seed %d (trial *i* uses seed + *i*)%s.", run.Date.UTC().Format("2006-01-02 15:04 MST"), commit,
		s.Trials, t.duration.Round(time.Second), run.Seed, settingsText(run.Settings))
	p("")
	p("| figure | value |")
	p("|---|---|")
	p("| overlaps (two processes acting as %s at one instant) | %d |", leaderOf, s.Overlaps())
	if roles {
		var parts []string
		for _, r := range t.roles {
			parts = append(parts, fmt.Sprintf("%s=%d", r, t.byRole[r].overlaps))
		}
		p("| overlaps per role | %s |", strings.Join(parts, " "))
	}
	p("| act spans checked | %d |", t.spans)
	if s.WritesChecked {
		p("| interleaved committed writes (a record read_committed after one of a later tenure) | %d of %d records |", s.InterleavedWrites, s.CommittedWrites)
		p("| commits after their tenure's end (commit called after a later tenure fenced it) | %d of %d commits |", s.LateCommits(), s.timedCommits())
	}
	p("| members aborted by librdkafka (confluentinc/librdkafka#4605) | %d |", s.LibrdkafkaAborts)
	p("| overlaps of acquired..fenced/revoked intervals (information only) | %d, longest %v |", t.infos, t.longestInfo.Round(time.Millisecond))
	if roles {
		p("| worst leaderless gap of one role | %v (role %s, after a `%s` fault) |", t.gap.Round(time.Millisecond), t.gapRole, t.gapAfter)
	} else {
		p("| worst leaderless gap | %v (after a `%s` fault) |", t.gap.Round(time.Millisecond), t.gapAfter)
	}
	p("")
	if roles {
		p("| kind | faults | hit a leader | roles hit | moved | resumed | unaffected | median | max (injection to next action, per role hit) |")
		p("|---|---|---|---|---|---|---|---|---|")
		for _, r := range t.kindRows(true) {
			p("| `%s` | %d | %d | %d | %d | %d | %d | %s | %s |", r.kind, r.faults, r.leader, r.hit, r.moved, r.resumed, r.unaffected, r.median, r.max)
		}
		p("")
		p("| role | act spans | overlaps | worst gap | after |")
		p("|---|---|---|---|---|")
		for _, r := range t.roles {
			f := t.byRole[r]
			p("| %s | %d | %d | %v | `%s` |", r, f.spans, f.overlaps, f.gap.Round(time.Millisecond), f.gapAfter)
		}
	} else {
		p("| kind | faults | hit the leader | moved | resumed | unaffected | median | max (injection to next leader action) |")
		p("|---|---|---|---|---|---|---|---|")
		for _, r := range t.kindRows(false) {
			p("| `%s` | %d | %d | %d | %d | %d | %s | %s |", r.kind, r.faults, r.leader, r.moved, r.resumed, r.unaffected, r.median, r.max)
		}
	}
	var problems bytes.Buffer
	s.printOverlaps(&problems)
	s.printViolations(&problems)
	s.printLateCommits(&problems)
	if problems.Len() > 0 {
		p("")
		p("Overlaps, event-order violations and late commits:")
		p("")
		p("```")
		_, _ = w.Write(problems.Bytes())
		p("```")
	}
}

func settingsText(settings []string) string {
	if len(settings) == 0 {
		return ""
	}
	return ", with `" + strings.Join(settings, " ") + "`"
}

// AppendMarkdown appends the run's section to the page at path, starting the page if there is
// none, so that runs of several modes (one broker and three, a single leader and roles) make one
// page.
func (s Summary) AppendMarkdown(path string, run RunInfo) error {
	title := reportTitle
	if s.Kafka != "" {
		title = realReportTitle
	}
	return AppendSection(path, title, func(w io.Writer) { s.Markdown(w, run) })
}

// AppendSection appends what section writes to the Markdown page at path, beginning a new page
// with title if there is none. Pages that a suite writes (chaos-results.md, and the kernel fault
// suite's) grow by one section per run this way.
func AppendSection(path, title string, section func(io.Writer)) error {
	var b bytes.Buffer
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		b.WriteString(title)
	} else if err != nil {
		return err
	}
	section(&b)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b.Bytes())
	return errors.Join(err, f.Close())
}

// Settings lists the environment variables beginning with prefix that shape a run, KEY=value and
// sorted, to say in a report how to run it again; those named in except (where output goes) are
// left out.
func Settings(prefix string, except ...string) []string {
	var settings []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(key, prefix) && !slices.Contains(except, key) {
			settings = append(settings, kv)
		}
	}
	slices.Sort(settings)
	return settings
}

// GitCommit is the commit of the repository the suite runs in (with "-dirty" if it has changes),
// or "" where git cannot tell: test binaries carry no VCS stamp.
func GitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
