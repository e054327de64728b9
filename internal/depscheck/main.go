// Command depscheck lists the commands and C headers that the project's
// host scripts, Makefile and Go code use, one per line ("command ip",
// "header infiniband/verbs.h"), for scripts/deps-proof.sh to look for in a
// minimal Debian after scripts/deps.sh. Its test checks the same list
// against the packages of a fresh machine and those deps.sh installs.
//
//	go run ./internal/depscheck [-where] [ROOT]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	where := flag.Bool("where", false, "add the first place each is used")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	uses, errs, err := scan(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "depscheck:", err)
		os.Exit(1)
	}
	for _, e := range errs {
		fmt.Fprintln(os.Stderr, "depscheck:", e)
	}
	for _, s := range summarize(uses) {
		if _, ok := given[s.name]; ok && s.kind == "command" {
			continue
		}
		if *where {
			fmt.Printf("%s %s %s\n", s.kind, s.name, s.where)
		} else {
			fmt.Printf("%s %s\n", s.kind, s.name)
		}
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
}
