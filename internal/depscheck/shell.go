package main

import (
	"regexp"
	"strings"
)

// A scanner for the shell our scripts are written in: enough of bash's
// grammar (quotes, $(...), <(...), heredocs, case, [[ ]], (( )), function
// definitions) to find every simple command and its words. It does not
// run or expand anything: a word with an expansion has no literal value.

// word is one shell (or exec.Command) argument.
type word struct {
	raw   string // as written
	lit   string // its value, when ok
	ok    bool   // no expansion: lit is what the command gets
	param bool   // Go only: a parameter of the enclosing function
}

// call is one simple command: its words, where it is and, in a script, the
// shell function whose body holds it.
type call struct {
	words []word
	line  int
	fn    string
}

type heredoc struct {
	delim         string
	strip, quoted bool
}

type shParser struct {
	src   string
	pos   int
	base  int // line number of src's first line, minus one
	calls []call
	funcs map[string]bool
	cur   []word
	start int       // offset of cur's first word
	cases []bool    // one per open case: true while reading its patterns
	test  bool      // inside [[ ]]
	docs  []heredoc // pending heredocs: their bodies follow the next newline
	fn    string    // the function being defined (name() seen, body not yet)
	body  []fnBody  // open function bodies
	brace int       // depth of { } groups
}

type fnBody struct {
	name  string
	brace int
}

// parseShell returns the simple commands of a script and the names of the
// functions it defines. line0 is the number of src's first line.
func parseShell(src string, line0 int) ([]call, map[string]bool) {
	p := &shParser{src: src, base: line0 - 1, funcs: map[string]bool{}}
	p.list(false)
	return p.calls, p.funcs
}

func (p *shParser) peek(s string) bool {
	return p.pos < len(p.src) && strings.HasPrefix(p.src[p.pos:], s)
}

func (p *shParser) lineAt(off int) int {
	return p.base + 1 + strings.Count(p.src[:min(off, len(p.src))], "\n")
}

// blanks skips spaces, tabs and line continuations.
func (p *shParser) blanks() {
	for p.pos < len(p.src) {
		switch {
		case p.src[p.pos] == ' ' || p.src[p.pos] == '\t':
			p.pos++
		case p.peek("\\\n"):
			p.pos += 2
		default:
			return
		}
	}
}

// list parses commands until the end, or with sub until the ')' that
// closes a $( or <( whose body it is.
func (p *shParser) list(sub bool) {
	cur, start, cases, test := p.cur, p.start, p.cases, p.test
	p.cur, p.cases, p.test = nil, nil, false
	defer func() { p.cur, p.start, p.cases, p.test = cur, start, cases, test }()
	depth := 0 // open subshells
	for {
		p.blanks()
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		if c == '#' {
			p.comment()
			continue
		}
		if c == '\n' {
			p.end()
			p.pos++
			p.heredocs()
			continue
		}
		if n := len(p.cases); n > 0 && p.cases[n-1] {
			p.pattern(c)
			continue
		}
		if p.token(c, &depth) && sub {
			return
		}
	}
	p.end()
}

// comment skips a comment up to the end of its line.
func (p *shParser) comment() {
	for p.pos < len(p.src) && p.src[p.pos] != '\n' {
		p.pos++
	}
}

// pattern reads the patterns of a case arm, where c is: nothing here is a
// command.
func (p *shParser) pattern(c byte) {
	n := len(p.cases)
	switch c {
	case ')':
		p.cases[n-1] = false
		p.pos++
	case '|', '(', ';':
		p.pos++
	default:
		switch p.readWord().raw {
		case "esac":
			p.cases = p.cases[:n-1]
		case "":
			p.pos++ // an operator character no pattern has
		}
	}
}

// token reads the operator or word at p.pos, whose first character is c,
// keeping depth, the subshells open in the list. It reports whether it
// read a ')' that closes none of them.
func (p *shParser) token(c byte, depth *int) (closes bool) {
	switch {
	case c == ';':
		p.separator()
	case p.peek("&>"):
		p.pos += 2
		if p.peek(">") {
			p.pos++
		}
		p.target()
	case c == '&' || c == '|':
		if !p.test {
			p.end()
		}
		p.pos++
		if p.pos < len(p.src) && (p.src[p.pos] == c || p.src[p.pos] == '&') {
			p.pos++
		}
	case p.peek("(("):
		p.arith()
		p.add(word{raw: "(( ))"}, p.pos)
	case c == '(':
		p.pos++
		if p.test {
			return false
		}
		if len(p.cur) == 1 && p.cur[0].ok && p.closeParen() {
			// name() — a function definition; its body is the next { }.
			p.fn = p.cur[0].lit
			p.funcs[p.fn] = true
			p.cur = nil
			return false
		}
		p.end()
		*depth++
	case c == ')':
		p.pos++
		if p.test {
			return false
		}
		p.end()
		if *depth == 0 {
			return true
		}
		*depth--
	case c == '<' || c == '>' || isRedirect(p.src[p.pos:]):
		p.redirect()
	default:
		start := p.pos
		p.add(p.readWord(), start)
	}
	return false
}

// separator reads a ';', or the ';;', ';&' or ';;&' that ends a case
// arm: the patterns of the next arm follow.
func (p *shParser) separator() {
	p.end()
	switch {
	case p.peek(";;&"):
		p.pos += 3
	case p.peek(";;"), p.peek(";&"):
		p.pos += 2
	default:
		p.pos++
		return
	}
	if n := len(p.cases); n > 0 {
		p.cases[n-1] = true
	}
}

var fdRedirect = regexp.MustCompile(`^[0-9]+[<>]`)

func isRedirect(s string) bool { return fdRedirect.MatchString(s) }

// closeParen consumes the ')' of "name ()" if it comes next.
func (p *shParser) closeParen() bool {
	p.blanks()
	if p.peek(")") {
		p.pos++
		return true
	}
	return false
}

// arith skips an arithmetic (( )) or $(( )): no commands in there.
func (p *shParser) arith() {
	depth := 0
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '(':
			depth++
		case ')':
			depth--
		}
		p.pos++
		if depth == 0 {
			return
		}
	}
}

// redirect consumes a redirection and its target; a heredoc's body is read
// at the next newline.
func (p *shParser) redirect() {
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	if p.peek("<(") || p.peek(">(") {
		// A process substitution as an argument.
		start := p.pos
		p.pos += 2
		p.list(true)
		p.pos = min(p.pos, len(p.src))
		p.add(word{raw: p.src[start:p.pos]}, start)
		return
	}
	switch {
	case p.peek("<<<"):
		p.pos += 3
	case p.peek("<<"):
		p.pos += 2
		strip := p.peek("-")
		if strip {
			p.pos++
		}
		p.blanks()
		d := p.readWord()
		p.docs = append(p.docs, heredoc{delim: d.lit, strip: strip, quoted: strings.ContainsAny(d.raw, `'"\`)})
		return
	case p.peek(">>"), p.peek(">|"), p.peek(">&"), p.peek("<&"), p.peek("<>"):
		p.pos += 2
	default:
		p.pos++
	}
	p.target()
}

// target reads a redirection's target: its expansions may hold commands.
func (p *shParser) target() {
	p.blanks()
	if p.peek("<(") || p.peek(">(") {
		p.pos += 2
		p.list(true)
		return
	}
	p.readWord()
}

// heredocs skips the bodies of the pending heredocs; an unquoted one's
// command substitutions run, so they are scanned.
func (p *shParser) heredocs() {
	docs := p.docs
	p.docs = nil
	for _, d := range docs {
		bodyStart, bodyEnd := p.pos, len(p.src)
		for p.pos < len(p.src) {
			e := strings.IndexByte(p.src[p.pos:], '\n')
			if e < 0 {
				e = len(p.src) - p.pos
			}
			line := p.src[p.pos : p.pos+e]
			if d.strip {
				line = strings.TrimLeft(line, "\t")
			}
			next := min(p.pos+e+1, len(p.src))
			if line == d.delim {
				bodyEnd = p.pos
				p.pos = next
				break
			}
			p.pos = next
		}
		if !d.quoted {
			after := p.pos
			p.pos = bodyStart
			for p.pos < bodyEnd {
				switch p.src[p.pos] {
				case '\\':
					p.pos += 2
				case '$':
					p.dollar()
				case '`':
					p.backtick()
				default:
					p.pos++
				}
			}
			p.pos = after
		}
	}
}

var assignPrefix = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=`)

// readWord reads one word, scanning the commands of its substitutions.
func (p *shParser) readWord() word {
	start := p.pos
	var lit strings.Builder
	ok := true
loop:
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '\\':
			if p.pos+1 < len(p.src) && p.src[p.pos+1] != '\n' {
				lit.WriteByte(p.src[p.pos+1])
			}
			p.pos += 2
		case c == '\'':
			e := strings.IndexByte(p.src[p.pos+1:], '\'')
			if e < 0 {
				e = len(p.src) - p.pos - 1
			}
			lit.WriteString(p.src[p.pos+1 : p.pos+1+e])
			p.pos += e + 2
		case c == '"':
			if !p.dquote(&lit) {
				ok = false
			}
		case p.peek("$'"):
			// ANSI-C quoting: close enough for names.
			p.pos += 2
			for p.pos < len(p.src) && p.src[p.pos] != '\'' {
				if p.src[p.pos] == '\\' {
					p.pos++
				}
				p.pos++
			}
			p.pos++
			ok = false
		case c == '$' || c == '`':
			ok = p.expansion(&lit) && ok
		case c == '(' && assignPrefix.MatchString(p.src[start:p.pos]):
			p.array()
			ok = false
		case strings.IndexByte(" \t\n;&|()<>", c) >= 0:
			break loop
		default:
			lit.WriteByte(c)
			p.pos++
		}
	}
	p.pos = min(p.pos, len(p.src)) // an unclosed quote ends with the text
	return word{raw: p.src[start:p.pos], lit: lit.String(), ok: ok}
}

// dquote reads a "..." string into lit; false if it has an expansion.
func (p *shParser) dquote(lit *strings.Builder) bool {
	ok := true
	p.pos++
	for p.pos < len(p.src) && p.src[p.pos] != '"' {
		c := p.src[p.pos]
		switch {
		case c == '\\' && p.pos+1 < len(p.src):
			if strings.IndexByte("$`\"\\\n", p.src[p.pos+1]) < 0 {
				lit.WriteByte(c)
			}
			if p.src[p.pos+1] != '\n' {
				lit.WriteByte(p.src[p.pos+1])
			}
			p.pos += 2
		case c == '$' || c == '`':
			ok = p.expansion(lit) && ok
		default:
			lit.WriteByte(c)
			p.pos++
		}
	}
	p.pos++
	return ok
}

// expansion reads the $... or `...` at p.pos; false if it expands to
// something (then the word is no longer a known name). A lone '$' is a
// literal one.
func (p *shParser) expansion(lit *strings.Builder) bool {
	if p.src[p.pos] == '`' {
		p.backtick()
		return false
	}
	if p.dollar() {
		return false
	}
	lit.WriteByte('$')
	return true
}

// dollar consumes an expansion at '$', scanning a command substitution's
// commands; false if the '$' was a plain character.
func (p *shParser) dollar() bool {
	switch {
	case p.peek("$(("):
		p.pos++
		p.arith()
	case p.peek("$("):
		p.pos += 2
		p.list(true)
	case p.peek("${"):
		p.pos += 2
		for depth := 1; p.pos < len(p.src) && depth > 0; {
			switch {
			case p.src[p.pos] == '\\':
				p.pos += 2
			case p.peek("$"):
				p.dollar()
			case p.src[p.pos] == '{':
				depth++
				p.pos++
			case p.src[p.pos] == '}':
				depth--
				p.pos++
			default:
				p.pos++
			}
		}
	default:
		p.pos++
		if p.pos >= len(p.src) {
			return false
		}
		c := p.src[p.pos]
		switch {
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			for p.pos < len(p.src) && (p.src[p.pos] == '_' || isAlnum(p.src[p.pos])) {
				p.pos++
			}
		case strings.IndexByte("0123456789@*#?$!-", c) >= 0:
			p.pos++
		default:
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// backtick scans an old-style `...` command substitution.
func (p *shParser) backtick() {
	start := p.pos + 1
	p.pos = start
	for p.pos < len(p.src) && p.src[p.pos] != '`' {
		if p.src[p.pos] == '\\' {
			p.pos++
		}
		p.pos++
	}
	inner, _ := parseShell(p.src[start:min(p.pos, len(p.src))], p.lineAt(start))
	p.calls = append(p.calls, inner...)
	p.pos++
}

// array reads the (...) of an array assignment.
func (p *shParser) array() {
	p.pos++
	for {
		p.blanks()
		if p.pos >= len(p.src) {
			return
		}
		switch p.src[p.pos] {
		case ')':
			p.pos++
			return
		case '\n':
			p.pos++
		case '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			if w := p.readWord(); w.raw == "" {
				p.pos++ // a stray operator character
			}
		}
	}
}

// reserved words that may precede a command.
var reserved = map[string]bool{"!": true, "{": true, "}": true, "if": true, "then": true, "else": true,
	"elif": true, "fi": true, "do": true, "done": true, "while": true, "until": true, "time": true}

// atStart: nothing but reserved words and assignments before the next word.
func (p *shParser) atStart() bool {
	for _, w := range p.cur {
		if !reserved[w.raw] && !assignPrefix.MatchString(w.raw) {
			return false
		}
	}
	return true
}

// add appends a word to the command being read, handling the words that
// open [[ ]], a case, or a function body.
func (p *shParser) add(w word, start int) {
	if p.test {
		p.test = w.raw != "]]"
		return
	}
	if len(p.cur) == 0 {
		p.start = start
	}
	if p.atStart() {
		switch w.raw {
		case "[[":
			p.test = true
		case "{":
			p.brace++
			if p.fn != "" {
				p.body = append(p.body, fnBody{p.fn, p.brace})
				p.fn = ""
			}
		case "}":
			if n := len(p.body); n > 0 && p.body[n-1].brace == p.brace {
				p.body = p.body[:n-1]
			}
			p.brace--
		case "esac":
			if n := len(p.cases); n > 0 {
				p.cases = p.cases[:n-1]
			}
			return
		}
	}
	if w.raw == "in" && len(p.cur) == 2 && p.cur[0].raw == "case" {
		p.cur = nil
		p.cases = append(p.cases, true)
		return
	}
	p.cur = append(p.cur, w)
}

// end completes the command being read.
func (p *shParser) end() {
	ws := p.cur
	p.cur = nil
	for len(ws) > 0 && (reserved[ws[0].raw] || assignPrefix.MatchString(ws[0].raw)) {
		ws = ws[1:]
	}
	if len(ws) == 0 {
		return
	}
	switch ws[0].raw {
	case "for", "select", "[[", "(( ))", "case":
		return
	case "function":
		if len(ws) > 1 {
			p.fn = ws[1].lit
			p.funcs[p.fn] = true
		}
		return
	}
	fn := ""
	if n := len(p.body); n > 0 {
		fn = p.body[n-1].name
	}
	p.calls = append(p.calls, call{words: ws, line: p.lineAt(p.start), fn: fn})
}
