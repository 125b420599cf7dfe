// Package kernel is goneli's kernel-level fault suite. Where the chaos suite (package chaos) injects
// its faults in the embedded broker's own network layer, here the kernel does: every member process
// runs in a network namespace of its own, joined to the broker's by a veth pair on a bridge, and
// faults are BPF programs on those links that drop packets, an NFQUEUE reader that holds them
// (a delay), the link itself going down, and signals. The members and the checker are the chaos
// suite's (internal/member, internal/verdict).
//
// It needs root, network namespaces, veth, bridges, iptables with the NFQUEUE target and tcx BPF
// links (Linux 6.6 or later), and skips with the reason where any of them is missing. Everything it makes is named
// with the prefix gnk and its process ID, removed when the test ends, and swept at the start of a
// later run if a crashed run left it behind. See docs/chaos.md.
//
// The suite is in the package's tests; this file only documents it.
package kernel
