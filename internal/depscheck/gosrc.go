package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
)

// runner is how a function that runs commands takes its command line.
type runner struct {
	from int  // the argument the command line starts at
	each bool // every argument is a command name (LookPath and kin)
}

// goRunners are the functions, by the name they are called with, whose
// arguments name commands to run. A function that passes its parameter on
// as a command must be listed here, or the calls to it go unchecked: the
// scan reports any that is not.
var goRunners = map[string]runner{
	"exec.Command":        {},
	"exec.CommandContext": {from: 1},
	"exec.LookPath":       {each: true},
	"lookTools":           {each: true}, // ipoibd tests: the tools a test needs
	"runBinary":           {from: 1},    // ipoibd tests: runBinary(t, NAME, ARGS...)
	"command":             {from: 1},    // ipoibd tests: host K runs NAME ARGS...
	"on":                  {from: 1},    // ipoibd tests: host K runs CMD...
	"try":                 {from: 1},    // the same, returning the error
	"inApp":               {},           // ipoibd tests: CMD... in another namespace
	"inPod":               {},           // cni tests: CMD... in a pod's namespace
	"Exec":                {from: 1},    // testnet: host I runs NAME ARGS...
	"Command":             {from: 1},    // testnet: cluster host K runs NAME ARGS...
	"nsCommand":           {from: 1},    // testnet: namespace NS runs NAME ARGS...
	"tsharkRun":           {from: 1},    // softib tests: tsharkRun(t, TSHARK, HOME, ARGS...)
}

// goFile finds the commands a Go file runs, and the C headers and
// compiler its cgo preamble needs.
type goFile struct {
	fset   *token.FileSet
	name   string
	src    []byte
	lits   map[*ast.FuncLit]string // closures by the variable they are assigned to
	uses   []use
	errors []string
}

func scanGo(name string, src []byte) ([]use, []string, error) {
	g := &goFile{fset: token.NewFileSet(), name: name, src: src, lits: map[*ast.FuncLit]string{}}
	f, err := parser.ParseFile(g.fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, nil, err
	}
	g.cgo(f)
	ast.Inspect(f, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == len(a.Rhs) {
			for i, r := range a.Rhs {
				if l, ok := r.(*ast.FuncLit); ok {
					if id, ok := a.Lhs[i].(*ast.Ident); ok {
						g.lits[l] = id.Name
					}
				}
			}
		}
		return true
	})
	g.walk(f, "", nil)
	return filterRepo(g.uses), g.errors, nil
}

func (g *goFile) at(p token.Pos) string {
	pos := g.fset.Position(p)
	return fmt.Sprintf("%s:%d", g.name, pos.Line)
}

// cgo: a file that imports "C" needs the C compiler and the headers its
// preamble includes (the dev packages).
func (g *goFile) cgo(f *ast.File) {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.IMPORT {
			continue
		}
		for _, s := range gd.Specs {
			is := s.(*ast.ImportSpec)
			if is.Path.Value != `"C"` {
				continue
			}
			where := g.at(is.Pos())
			g.uses = append(g.uses, use{kind: "command", name: "gcc", where: where})
			doc := is.Doc
			if doc == nil {
				doc = gd.Doc
			}
			if doc == nil {
				continue
			}
			for _, l := range strings.Split(doc.Text(), "\n") {
				l = strings.TrimSpace(l)
				if h, ok := strings.CutPrefix(l, "#include <"); ok && strings.HasSuffix(h, ">") {
					g.uses = append(g.uses, use{kind: "header", name: strings.TrimSuffix(h, ">"), where: where})
				}
			}
		}
	}
}

// walk visits n inside the function fn whose string parameters are params.
func (g *goFile) walk(n ast.Node, fn string, params map[string]bool) {
	ast.Inspect(n, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncDecl:
			if x.Body != nil {
				g.walk(x.Body, x.Name.Name, stringParams(x.Type, nil))
			}
			return false
		case *ast.FuncLit:
			name := fn // an anonymous closure belongs to its function
			if v, ok := g.lits[x]; ok {
				name = v
			}
			g.walk(x.Body, name, stringParams(x.Type, params))
			return false
		case *ast.CallExpr:
			g.call(x, fn, params)
		}
		return true
	})
}

// stringParams: the parameters of type string, []string or ...string,
// with those of the enclosing function (closures see them).
func stringParams(t *ast.FuncType, outer map[string]bool) map[string]bool {
	ps := map[string]bool{}
	for k := range outer {
		ps[k] = true
	}
	for _, f := range t.Params.List {
		typ := f.Type
		switch x := typ.(type) {
		case *ast.Ellipsis:
			typ = x.Elt
		case *ast.ArrayType:
			typ = x.Elt
		}
		if id, ok := typ.(*ast.Ident); ok && id.Name == "string" {
			for _, n := range f.Names {
				ps[n.Name] = true
			}
		}
	}
	return ps
}

func calleeName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		if x, ok := f.X.(*ast.Ident); ok && x.Name == "exec" {
			return "exec." + f.Sel.Name
		}
		return f.Sel.Name
	}
	return ""
}

func (g *goFile) call(c *ast.CallExpr, fn string, params map[string]bool) {
	r, ok := goRunners[calleeName(c)]
	if !ok {
		return
	}
	where := g.at(c.Pos())
	var ws []word
	for i, a := range c.Args {
		if i >= r.from {
			ws = append(ws, g.words(a, c.Ellipsis.IsValid() && i == len(c.Args)-1, params)...)
		}
	}
	if r.each {
		for _, w := range ws {
			if w.ok {
				g.uses = append(g.uses, use{kind: "command", name: w.lit, where: where})
			}
		}
		return
	}
	names, scripts, wrapper := commandsIn(ws)
	for _, n := range names {
		g.uses = append(g.uses, use{kind: "command", name: n, where: where})
	}
	for _, s := range scripts {
		g.uses = append(g.uses, scriptUses(s, where, g.fset.Position(c.Pos()).Line, nil)...)
	}
	if _, listed := goRunners[fn]; wrapper && !listed {
		g.errors = append(g.errors, fmt.Sprintf("%s: %s passes its caller's argument on as the command to run: "+
			"add it to goRunners (internal/depscheck/gosrc.go) so that the commands its callers name are checked", where, fn))
	}
}

// words turns an argument into the command-line words it stands for; a
// spread argument (x...) may stand for several.
func (g *goFile) words(e ast.Expr, spread bool, params map[string]bool) []word {
	switch x := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING {
			return []word{{raw: x.Value, lit: s, ok: true}}
		}
	case *ast.Ident:
		if params[x.Name] {
			return []word{{raw: x.Name, lit: "$GOEXPR", param: true}}
		}
	case *ast.CallExpr: // append(LIST, MORE...)
		if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "append" && spread {
			var ws []word
			for i, a := range x.Args {
				ws = append(ws, g.words(a, i == 0 || x.Ellipsis.IsValid() && i == len(x.Args)-1, params)...)
			}
			return ws
		}
	case *ast.CompositeLit: // []string{...}...
		if spread {
			var ws []word
			for _, el := range x.Elts {
				ws = append(ws, g.words(el, false, params)...)
			}
			return ws
		}
	case *ast.BinaryExpr: // "--flag="+value, "echo x | socat ..."+addr
		if x.Op == token.ADD {
			l, r := g.words(x.X, false, params), g.words(x.Y, false, params)
			if len(l) == 1 && len(r) == 1 {
				t := l[0].lit + r[0].lit
				return []word{{raw: t, lit: t}}
			}
		}
	}
	// Unknown: as shell text, an expansion (for the scripts of sh -c).
	return []word{{raw: string(g.src[g.fset.Position(e.Pos()).Offset:g.fset.Position(e.End()).Offset]), lit: "$GOEXPR"}}
}
