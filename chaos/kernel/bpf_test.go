package kernel

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// tcxDrop is what a tcx program returns to drop the packet (TCX_DROP).
const tcxDrop = 2

// dropProgram drops every packet: on a link's ingress, a silent one-way loss.
func dropProgram() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "gnk_drop",
		Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, tcxDrop),
			asm.Return(),
		},
	})
}

// attachment is a program attached to one direction of a link. Closing it detaches the program;
// so does the test process's death, since a tcx link lives as long as its file descriptor.
type attachment struct {
	mu    sync.Mutex
	links []link.Link
}

// attach attaches prog to dev's ingress or egress in namespace ns ("" for the test's own).
func (a *attachment) attach(ns, dev string, prog *ebpf.Program, at ebpf.AttachType) error {
	do := func() error {
		i, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: i.Index, Program: prog, Attach: at})
		if err != nil {
			return fmt.Errorf("attaching to %s %s: %w", ns, dev, err)
		}
		a.mu.Lock()
		a.links = append(a.links, l)
		a.mu.Unlock()
		return nil
	}
	if ns == "" {
		return do()
	}
	return inNS(ns, do)
}

// Close detaches every program attached.
func (a *attachment) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	a.links = nil
	return errors.Join(errs...)
}
