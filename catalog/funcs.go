package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"text/template"
)

// A param that is a JSON number reaches a template as a json.Number, its
// text exactly as sent ({{.amount}} prints 12000 or 12.50 as written).
// text/template's own printf and comparisons see a string there:
// printf "%.2f" printed "%!f(json.Number=12.5)" to the recipient, and
// gt .points 100 failed, or compared "9" and "100" as text when both were
// params. The templates' printf and comparisons (funcs) take such a
// number as the number it is, and a printf whose verbs do not fit its
// arguments is a render error (refused at intake, 422), never a send of
// fmt's error text.
var funcs = template.FuncMap{
	"printf": printf,
	"eq":     equal,
	"ne":     func(a, b any) (bool, error) { eq, err := equal(a, b); return !eq, err },
	"lt":     func(a, b any) (bool, error) { return compare(a, b, "lt", func(c int) bool { return c < 0 }) },
	"le":     func(a, b any) (bool, error) { return compare(a, b, "le", func(c int) bool { return c <= 0 }) },
	"gt":     func(a, b any) (bool, error) { return compare(a, b, "gt", func(c int) bool { return c > 0 }) },
	"ge":     func(a, b any) (bool, error) { return compare(a, b, "ge", func(c int) bool { return c >= 0 }) },
	"json":   jsonText,
}

// jsonText is the json function: v written as JSON, so a template that
// builds a JSON document (a webhook body a receiver parses) stays one
// whatever a param holds. A text param is quoted and escaped (a quote, a
// backslash, a line break cannot end the string and add fields), a number
// is its text as sent, an object or list is written whole. <, > and & are
// kept as they are: the document is not HTML. config's template check
// knows the name (config/kinds.go).
func jsonText(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Not wrapped: encoding/json's error may quote the value.
		return "", fmt.Errorf("json cannot write %s", describe(v))
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// printf is text/template's printf (fmt.Sprintf) with json.Number
// arguments formatted as numbers: %d and the other integer verbs take a
// whole number, %f and the other float verbs any number, %s %v %q the
// number's text. A verb that fits no argument, a missing or extra
// argument, or an object printed whole is an error.
func printf(format string, args ...any) (string, error) {
	// The format alone, each argument printing nothing: what fmt says
	// there is of the format itself (a missing or extra argument, a bad
	// verb or width), not of a param's text.
	silent := make([]any, len(args))
	for i := range silent {
		silent[i] = silentArg{}
	}
	if probe := fmt.Sprintf(format, silent...); strings.Contains(probe, "%!") {
		return "", fmt.Errorf("printf %q with %d arguments: %s", format, len(args), probe)
	}
	var bad error
	wrapped := make([]any, len(args))
	for i, a := range args {
		wrapped[i] = &checkedArg{v: a, bad: &bad}
	}
	out := fmt.Sprintf(format, wrapped...)
	if bad != nil {
		return "", fmt.Errorf("printf %q: %w", format, bad)
	}
	return out, nil
}

// silentArg prints nothing with any verb.
type silentArg struct{}

func (silentArg) Format(fmt.State, rune) {}

// checkedArg formats one printf argument, a json.Number as a number,
// and keeps the first misfit in bad.
type checkedArg struct {
	v   any
	bad *error
}

func (c *checkedArg) Format(st fmt.State, verb rune) {
	spec := fmt.FormatString(st, verb)
	fail := func(format string, a ...any) {
		if *c.bad == nil {
			*c.bad = fmt.Errorf(format, a...)
		}
	}
	if n, ok := c.v.(json.Number); ok {
		switch verb {
		case 'd', 'b', 'o', 'O', 'x', 'X', 'c', 'U':
			i, err := n.Int64()
			if err != nil {
				fail("%%%c needs a whole number, not %s", verb, n)
				return
			}
			fmt.Fprintf(st, spec, i)
		case 'e', 'E', 'f', 'F', 'g', 'G':
			f, err := n.Float64()
			if err != nil {
				fail("%%%c: %s is out of range", verb, n)
				return
			}
			fmt.Fprintf(st, spec, f)
		case 's', 'v', 'q':
			fmt.Fprintf(st, spec, string(n))
		default:
			fail("%%%c does not print a number (%s)", verb, n)
		}
		return
	}
	if k := reflect.ValueOf(c.v).Kind(); k == reflect.Map || k == reflect.Slice {
		fail("%%%c of an object or list (print its fields, or range over it)", verb)
		return
	}
	out := fmt.Sprintf(spec, c.v)
	if strings.HasPrefix(out, "%!"+string(verb)+"(") && !strings.HasPrefix(fmt.Sprint(c.v), "%!") {
		fail("%%%c does not print %s", verb, describe(c.v))
		return
	}
	_, _ = st.Write([]byte(out))
}

// describe names a value for an error: a string's text is not shown (a
// param may be personal data), its type is.
func describe(v any) string {
	switch v.(type) {
	case string:
		return "text"
	case bool:
		return "true or false"
	}
	return fmt.Sprintf("a %T", v)
}

// equal is eq (whether any of b equals a): numbers, json.Number among
// them, compare by value; anything else as text/template's builtin does.
func equal(a any, b ...any) (bool, error) {
	for _, x := range b {
		eq, err := compare(a, x, "eq", func(c int) bool { return c == 0 })
		if err != nil || eq {
			return eq, err
		}
	}
	return false, nil
}

// compare compares a and b by value when either is a json.Number (the
// other must be a number too), else with the builtin op.
func compare(a, b any, op string, holds func(int) bool) (bool, error) {
	_, an := a.(json.Number)
	_, bn := b.(json.Number)
	if !an && !bn {
		return builtin(op, a, b)
	}
	x, ok := ratOf(a)
	if !ok {
		return false, fmt.Errorf("%s: cannot compare %s with a number", op, describe(a))
	}
	y, ok := ratOf(b)
	if !ok {
		return false, fmt.Errorf("%s: cannot compare a number with %s", op, describe(b))
	}
	return holds(x.Cmp(y)), nil
}

// ratOf is v's value when v is a number (a json.Number, or a Go number
// such as a template's literal).
func ratOf(v any) (*big.Rat, bool) {
	switch n := v.(type) {
	case json.Number:
		return new(big.Rat).SetString(string(n))
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return new(big.Rat).SetInt64(rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return new(big.Rat).SetUint64(rv.Uint()), true
	case reflect.Float32, reflect.Float64:
		r := new(big.Rat)
		if r.SetFloat64(rv.Float()) == nil {
			return nil, false
		}
		return r, true
	}
	return nil, false
}

// builtins are text/template's own comparisons, run on two values.
var builtins = map[string]*template.Template{}

func init() {
	for _, op := range []string{"eq", "lt", "le", "gt", "ge"} {
		builtins[op] = template.Must(template.New(op).Parse("{{" + op + " .A .B}}"))
	}
}

// builtin is text/template's op on a and b.
func builtin(op string, a, b any) (bool, error) {
	var out strings.Builder
	if err := builtins[op].Execute(&out, struct{ A, B any }{a, b}); err != nil {
		// Its own words, without the helper template's position.
		msg := err.Error()
		if i := strings.Index(msg, "error calling "+op+": "); i >= 0 {
			msg = msg[i+len("error calling "+op+": "):]
		}
		return false, fmt.Errorf("%s", msg)
	}
	return out.String() == "true", nil
}
