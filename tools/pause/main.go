// pause is the sandbox ("infra") container of a Pod on the local real node: it holds the Pod's
// namespaces and does nothing else until the runtime stops it. Static (CGO_ENABLED=0), no libc.
//
// As PID 1 of the sandbox it also reaps zombies that get re-parented to it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
