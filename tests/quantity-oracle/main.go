// Command quantity-oracle prints k8s.io/apimachinery's resource.Quantity verdicts on
// quantity strings, for shared/tests/quantity_vs_go.rs to hold mcsched's
// shared/src/quantity.rs to them.
//
// Each stdin line is one quantity, or two separated by a tab. Each is parsed as the API
// server decodes a quantity from JSON (UnmarshalJSON: strings.TrimSpace, then
// ParseQuantity). Each output line is tab-separated: per quantity either "err" or
// "ok <String()> <Value()> <exact value> <MilliValue()> <exact milli-value> <format>",
// String() as a computed quantity prints it (see value for the rest); for a pair, then
// "<Cmp> <a.Add(b)'s String()> <Value()> <exact> <MilliValue()> <exact>".
package main

import (
	"bufio"
	"fmt"
	"math/big"
	"os"
	"strings"

	"gopkg.in/inf.v0"
	"k8s.io/apimachinery/pkg/api/resource"
)

var (
	minInt64 = big.NewInt(-1 << 63)
	maxInt64 = big.NewInt(1<<63 - 1)
)

// value is q's ScaledValue(scale), then the exact value in those units rounded away
// from zero (as ParseQuantity rounds to nano-units and the int64 form's ScaledValue
// rounds), or "big" for either when that exact value lies outside int64 (ScaledValue
// then wraps). They differ where the inf.Dec form's scaledValue rounds a negative value
// otherwise (truncated, plus one) or wraps one whose nano-units exceed int64. The value
// is read from a copy: AsDec turns the int64 form into an inf.Dec in place.
func value(q resource.Quantity, scale resource.Scale) string {
	v := q.DeepCopy()
	got := v.ScaledValue(scale)
	exact := q.DeepCopy()
	d := new(inf.Dec).Set(exact.AsDec())
	// In units of 10^-scale (Milli: thousandths), every digit kept (no rounding yet).
	d.SetScale(d.Scale() + inf.Scale(scale))
	r := new(inf.Dec).Round(d, 0, inf.RoundUp)
	u := r.UnscaledBig()
	if u.Cmp(minInt64) < 0 || u.Cmp(maxInt64) > 0 {
		return "big big"
	}
	return fmt.Sprintf("%d %d", got, u.Int64())
}

// canonical is q's String() as a computed quantity prints it: a parsed quantity's
// String() repeats a canonical-looking input verbatim ("1.G"), which no sum does.
func canonical(q resource.Quantity) string {
	c := q.DeepCopy()
	c.Add(resource.Quantity{Format: q.Format})
	return c.String()
}

func describe(q resource.Quantity) string {
	return strings.Join([]string{
		"ok", canonical(q), value(q, 0), value(q, resource.Milli), string(q.Format),
	}, " ")
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		fields := strings.Split(in.Text(), "\t")
		var parsed []resource.Quantity
		var cols []string
		for _, f := range fields {
			q, err := resource.ParseQuantity(strings.TrimSpace(f))
			if err != nil {
				cols = append(cols, "err")
				continue
			}
			parsed = append(parsed, q)
			cols = append(cols, describe(q))
		}
		if len(fields) == 2 && len(parsed) == 2 {
			a, b := parsed[0], parsed[1]
			cmp := a.Cmp(b)
			sum := a.DeepCopy()
			sum.Add(b)
			cols = append(cols, fmt.Sprintf("%d %s %s %s", cmp, canonical(sum), value(sum, 0), value(sum, resource.Milli)))
		}
		fmt.Fprintln(out, strings.Join(cols, "\t"))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "reading stdin:", err)
		os.Exit(1)
	}
}
