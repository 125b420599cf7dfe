package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

const versionAbout = `Prints the version of neli (the goneli module it was built from), of confluent-kafka-go
and the librdkafka it bundles, and of Go. A build from a source checkout reports (devel),
with the commit when the build recorded one; 'go install github.com/goneli/goneli/cmd/neli@vX'
reports vX.`

func runVersion(args []string, stdout, _ io.Writer) (int, error) {
	fs := newFlagSet("version", "", versionAbout)
	if err := parse(fs, args, stdout); err != nil {
		return 0, err
	}
	if fs.NArg() > 0 {
		return 0, badUsage("unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintln(stdout, versionLine())
	return exitOK, nil
}

// versionLine reads the versions from the build information that the Go toolchain embeds.
func versionLine() string {
	neli, ckg, commit := "(unknown)", "(unknown)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		neli = bi.Main.Version
		for _, d := range bi.Deps {
			if d.Path == "github.com/confluentinc/confluent-kafka-go/v2" {
				ckg = d.Version
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				commit = " " + s.Value[:12]
			}
		}
	}
	_, librdkafka := kafka.LibraryVersion()
	return fmt.Sprintf("neli %s%s (github.com/goneli/goneli), confluent-kafka-go %s, librdkafka %s, %s %s/%s",
		neli, commit, ckg, librdkafka, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
