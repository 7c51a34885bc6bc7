package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Rate is how many tokens a limit grants per period, as written: a whole
// number (100) or a decimal with at most six places (0.5, 1.5). A decimal
// rate is kept exactly: it is compiled to the smallest whole count over a
// whole multiple of the period that is the same rate, so 0.5 per 1s is 1
// per 2s and 1.5 per 1s is 3 per 2s. Anything else written as a rate (1e3,
// 0x10, 1_000, a string) is refused with what to write instead, never
// rounded.
//
// Rate is a float64 so that Go code may write Rate: 100; a value set from
// Go must still be one a rules file could hold.
type Rate float64

// maxWhole is the largest whole number sluice reads without rounding: a
// float64, and so a JSON number read by most decoders, holds every integer
// up to 2^53 exactly.
const maxWhole = 1 << 53

// maxRatePlaces bounds a decimal rate's places.
const maxRatePlaces = 6

// parseRate reads a rate as written into the fraction num/den, reduced.
func parseRate(text string) (num, den int64, err error) {
	whole, frac, hasPoint := strings.Cut(text, ".")
	if whole == "" || !allDigits(whole) || (hasPoint && (frac == "" || !allDigits(frac))) {
		return 0, 0, fmt.Errorf("rate %s is not a number of tokens: write digits with at most one decimal point, such as 100 or 0.5%s",
			text, suggestion(text))
	}
	if len(frac) > maxRatePlaces {
		return 0, 0, fmt.Errorf("rate %s has more than %d decimal places: write a whole rate over a longer period", text, maxRatePlaces)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > maxWhole {
		return 0, 0, fmt.Errorf("rate %s is larger than 2^53, the largest rate sluice reads exactly", text)
	}
	num, den = w, 1
	for _, c := range frac {
		// Checked before each step: num stays below 2^53, so num×10+9
		// cannot wrap around int64 into a small rate.
		if num > (maxWhole-9)/10 {
			return 0, 0, fmt.Errorf("rate %s has too many digits to read exactly (at most 2^53 once its decimal point is dropped): "+
				"write fewer decimal places, or a whole rate over a longer period", text)
		}
		num, den = num*10+int64(c-'0'), den*10
	}
	g := gcd(num, den)
	if g > 1 {
		num, den = num/g, den/g
	}
	return num, den, nil
}

// suggestion says how to write a number given in a form rates do not take,
// when it is one: " (write 1000, not 1e3)".
func suggestion(text string) string {
	f, err := strconv.ParseFloat(strings.ReplaceAll(text, "_", ""), 64)
	if err != nil {
		if n, err := strconv.ParseInt(strings.ReplaceAll(text, "_", ""), 0, 64); err == nil {
			f = float64(n)
		} else {
			return ""
		}
	}
	if f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return ""
	}
	return fmt.Sprintf(" (write %s, not %s)", strconv.FormatFloat(f, 'f', -1, 64), text)
}

func allDigits(s string) bool { return strings.Trim(s, "0123456789") == "" }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// String formats r as a rules file would write it.
func (r Rate) String() string { return strconv.FormatFloat(float64(r), 'f', -1, 64) }

// fraction returns r as the reduced fraction num/den, or an error naming
// the value.
func (r Rate) fraction() (num, den int64, err error) {
	f := float64(r)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return 0, 0, fmt.Errorf("rate %v is not a number of tokens", f)
	case f < 0:
		return 0, 0, fmt.Errorf("rate %s must be positive", r)
	}
	return parseRate(r.String())
}

// UnmarshalJSON implements json.Unmarshaler: a JSON number, read from its
// text so that nothing is rounded on the way. Its errors are
// *json.UnmarshalTypeError, which the decoder completes with the field's
// path, with the problem and what to write in Value.
func (r *Rate) UnmarshalJSON(b []byte) error { return unmarshalJSON[Rate](string(b), r.set) }

// unmarshalJSON reads the JSON value text with set, a null leaving the
// field as it is. An error describes the value a numeric field of type T
// refuses.
func unmarshalJSON[T any](text string, set func(string) error) error {
	if text == "null" {
		return nil
	}
	err := set(text)
	if err == nil {
		return nil
	}
	kind := "number " + text
	switch text[0] {
	case '"':
		kind = "string " + text
	case 't', 'f':
		kind = "bool"
	case '[':
		kind = "array"
	case '{':
		kind = "object"
	}
	return &json.UnmarshalTypeError{Value: kind + " (" + err.Error() + ")", Type: reflect.TypeFor[T]()}
}

// UnmarshalYAML implements yaml.Unmarshaler, so that a rate in a rules file
// is read from its text, with the line in any error.
func (r *Rate) UnmarshalYAML(node *yaml.Node) error {
	return unmarshalYAML(node, r.set, "rate must be a number, such as 100 or 0.5")
}

// unmarshalYAML reads a YAML number with set; want says what to write
// instead of another kind of value. An error names the line.
func unmarshalYAML(node *yaml.Node, set func(string) error, want string) error {
	if node.Kind != yaml.ScalarNode || node.Tag == "!!str" {
		return fmt.Errorf("line %d: %s", node.Line, want)
	}
	if err := set(node.Value); err != nil {
		return fmt.Errorf("line %d: %w", node.Line, err)
	}
	return nil
}

// set reads text; a negative rate is kept, for Compile to refuse with
// the rule and field it belongs to.
func (r *Rate) set(text string) error {
	abs, neg := strings.CutPrefix(text, "-")
	num, den, err := parseRate(abs)
	if err != nil {
		return err
	}
	v := Rate(float64(num) / float64(den))
	if n, d, err := v.fraction(); err != nil || n != num || d != den {
		return fmt.Errorf("rate %s cannot be held exactly: write a whole rate over a longer period", text)
	}
	if neg {
		v = -v
	}
	*r = v
	return nil
}

// Tokens is a whole number of tokens: a limit's burst or an endpoint's
// cost. A fraction (1.5) or another spelling of a number (1e3, 0x10) is
// refused with what to write instead, never rounded.
type Tokens int64

// errNotWhole is the problem of a number of tokens that is not whole.
var errNotWhole = errors.New("is not a whole number of tokens")

// set reads a whole number of tokens as written.
func (t *Tokens) set(text string) error {
	digits := strings.TrimPrefix(text, "-")
	if digits == "" || !allDigits(digits) {
		if f, err := strconv.ParseFloat(digits, 64); err == nil && f == math.Trunc(f) && !strings.ContainsAny(digits, "eE") {
			return fmt.Errorf("%s %w: write %s", text, errNotWhole, strconv.FormatFloat(f, 'f', 0, 64))
		} else if err == nil && f != math.Trunc(f) {
			return fmt.Errorf("%s %w: write %s or %s", text, errNotWhole,
				strconv.FormatFloat(math.Floor(f), 'f', 0, 64), strconv.FormatFloat(math.Ceil(f), 'f', 0, 64))
		}
		return fmt.Errorf("%s %w: write digits only%s", text, errNotWhole, suggestion(digits))
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n > maxWhole || n < -maxWhole {
		return fmt.Errorf("%s is beyond 2^53, the largest number of tokens sluice reads exactly", text)
	}
	*t = Tokens(n)
	return nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Tokens) UnmarshalJSON(b []byte) error { return unmarshalJSON[Tokens](string(b), t.set) }

// UnmarshalYAML implements yaml.Unmarshaler, with the line in any error.
func (t *Tokens) UnmarshalYAML(node *yaml.Node) error {
	return unmarshalYAML(node, t.set, "want a whole number of tokens")
}
