// Command pause is the sandbox ("pause") container of the test nodes: it holds the pod's
// namespaces, reaps the zombies of its PID namespace and exits on SIGINT or SIGTERM, as
// Kubernetes' own pause does. Built statically; no image can be pulled on the test machine.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
