//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`) as integers, read, rounded and
//! printed as k8s.io/apimachinery's `resource.Quantity` reads, rounds and prints them
//! (held to it by shared/tests/quantity_vs_go.rs, through tests/quantity-oracle).

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum QuantityError {
    #[error("quantity {0:?} is empty")]
    Empty(String),
    #[error("quantity {0:?} is not a number with an optional suffix (like 500m, 2Gi, 1e3)")]
    Malformed(String),
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// How a quantity prints, as resource.Quantity's `Format`: chosen by the suffix it is
/// written with (`Ki` … `Ei` binary, `e3`/`E3` exponent, anything else decimal SI), kept
/// by sums (of their first non-zero term, as `Add`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// A parsed quantity held in nano-units, enough for every suffix Kubernetes accepts.
/// Equal and ordered by value alone (`1Ki` is `1024`), as `Cmp`.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// The largest magnitude parsed, in nano-units: int64's maximum of whole units (what
/// `Value()` can return; one more below zero). resource.Quantity caps binary quantities
/// there (its `maxAllowed`); a larger decimal one it keeps as an arbitrary-precision
/// decimal, which this refuses as too large (its `Value()` would wrap).
const LIMIT: u128 = i64::MAX as u128 * NANOS_PER_UNIT as u128;

/// A quantity's text as resource.Quantity's `parseQuantityString` splits it: sign,
/// integer digits without leading zeros, fraction digits, suffix.
struct Parts<'a> {
    negative: bool,
    /// Any digit before the suffix, zeros included.
    has_digits: bool,
    num: &'a [u8],
    denom: &'a [u8],
    suffix: &'a [u8],
}

/// As `parseQuantityString`: an optional sign, digits, an optional `.` and digits (both
/// may be empty: `.`, `-`, `1.` and `.5` are quantities, the missing digits zero), then
/// the suffix's letters, an optional sign and digits. None: not of that form.
fn split(s: &[u8]) -> Option<Parts<'_>> {
    let end = s.len();
    let mut pos = 0;
    let mut negative = false;
    match s.first() {
        Some(b'-') => {
            negative = true;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    let int_start = pos;
    while pos < end && s[pos] == b'0' {
        pos += 1;
    }
    let num_start = pos;
    while pos < end && s[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &s[num_start..pos];
    let mut denom: &[u8] = &[];
    if pos < end && s[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < end && s[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[denom_start..pos];
    }
    let has_digits = num_start > int_start || !num.is_empty() || !denom.is_empty();
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&s[pos]) {
        pos += 1;
    }
    if pos < end && (s[pos] == b'-' || s[pos] == b'+') {
        pos += 1;
    }
    while pos < end && s[pos].is_ascii_digit() {
        pos += 1;
    }
    (pos == end).then_some(Parts {
        negative,
        has_digits,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// A suffix as resource.Quantity's suffixer interprets it: (exponent, binary, format).
fn interpret(suffix: &[u8]) -> Option<(i32, bool, Format)> {
    let decimal = |e| Some((e, false, Format::DecimalSI));
    let binary = |e| Some((e, true, Format::BinarySI));
    match suffix {
        b"" => decimal(0),
        b"n" => decimal(-9),
        b"u" => decimal(-6),
        b"m" => decimal(-3),
        b"k" => decimal(3),
        b"M" => decimal(6),
        b"G" => decimal(9),
        b"T" => decimal(12),
        b"P" => decimal(15),
        b"E" => decimal(18),
        b"Ki" => binary(10),
        b"Mi" => binary(20),
        b"Gi" => binary(30),
        b"Ti" => binary(40),
        b"Pi" => binary(50),
        b"Ei" => binary(60),
        [b'e' | b'E', exp @ ..] if !exp.is_empty() => {
            // Read as an int64 (`strconv.ParseInt`), then kept as an int32: Go's
            // conversion wraps, so `1e4294967299` is `1e3`.
            let exp: i64 = std::str::from_utf8(exp).ok()?.parse().ok()?;
            Some((exp as i32, false, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// `digits × 2^exp2 × 10^shift` rounded up to a whole number (of nano-units), exactly
/// as resource.Quantity rounds what is finer than a nano-unit: any remainder, however
/// many digits down, rounds up. None: 10^39 or more, beyond any quantity held here.
fn nanos_of(digits: &[u8], shift: i64, exp2: u32) -> Option<u128> {
    let digits: Vec<u8> = digits
        .iter()
        .map(|b| b - b'0')
        .skip_while(|d| *d == 0)
        .collect();
    if digits.is_empty() {
        return Some(0);
    }
    let pow2 = 1u128 << exp2;
    let whole = |ds: &[u8]| -> Option<u128> {
        ds.iter()
            .try_fold(0u128, |v, &d| v.checked_mul(10)?.checked_add(u128::from(d)))
    };
    let n = digits.len() as u64;
    if shift >= 0 {
        if n + shift.unsigned_abs() > 39 {
            return None;
        }
        let shift = u32::try_from(shift).ok()?;
        return whole(&digits)?
            .checked_mul(10u128.checked_pow(shift)?)?
            .checked_mul(pow2);
    }
    // `k` digits fall below a nano-unit. Beyond 19 zeros after the point, what is left
    // times at most 2^60 is below one: it only rounds up (and the exponent may be huge).
    let k = shift.unsigned_abs();
    if n <= k && k - n >= 20 {
        return Some(1);
    }
    let (high, low) = digits.split_at(n.saturating_sub(k) as usize);
    let pad = (k - low.len() as u64) as usize;
    if high.len() > 39 {
        return None;
    }
    let high = whole(high)?.checked_mul(pow2)?;
    // The fraction 0.(pad zeros)(low) times 2^exp2, digit by digit from the last: the
    // carry out is its whole part, and any digit left non-zero a remainder.
    let mut carry = 0u128;
    let mut remainder = false;
    for &d in low.iter().rev().chain(std::iter::repeat_n(&0, pad)) {
        let t = u128::from(d) * pow2 + carry;
        remainder |= !t.is_multiple_of(10);
        carry = t / 10;
    }
    high.checked_add(carry)?.checked_add(u128::from(remainder))
}

impl Quantity {
    /// As the API server reads a quantity from JSON (`UnmarshalJSON`: spaces trimmed,
    /// then `ParseQuantity`), with `ParseQuantity`'s grammar, rounding (up to a whole
    /// nano-unit, away from zero) and cap (binary quantities at int64's maximum of
    /// units). Unlike it, a decimal quantity beyond that maximum is refused as too large.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let s = text.trim();
        if s.is_empty() {
            return Err(QuantityError::Empty(text.to_string()));
        }
        let malformed = || QuantityError::Malformed(text.to_string());
        let parts = split(s.as_bytes()).ok_or_else(malformed)?;
        let (exponent, binary, format) = interpret(parts.suffix).ok_or_else(malformed)?;
        // Without a digit (`m`, `-`, `.Gi`) the number is zero where ParseQuantity's
        // int64 fast path takes it, and an error where it falls back to inf.Dec, which
        // wants a digit: an exponent below nano, or Pi and Ei (too many digits for the
        // fast path's precision estimate).
        if !parts.has_digits && (exponent < -9 || (binary && exponent >= 50)) {
            return Err(malformed());
        }
        let digits = [parts.num, parts.denom].concat();
        // value = digits × 10^exp10 × 2^exp2, in nano-units 10^(exp10 + 9). The exponent
        // is an int32: summed in i64, neither the fraction's length nor 9 overflows it.
        let mut exp10 = -(parts.denom.len() as i64);
        let mut exp2 = 0;
        if binary {
            exp2 = exponent.unsigned_abs();
        } else {
            exp10 += i64::from(exponent);
        }
        // int64 reaches one unit further below zero; Go's binary cap does not (it caps
        // the magnitude, then restores the sign).
        let limit = if parts.negative && !binary {
            LIMIT + NANOS_PER_UNIT as u128
        } else {
            LIMIT
        };
        let magnitude = match nanos_of(&digits, exp10 + 9, exp2) {
            Some(n) if n <= limit => n,
            _ if binary => LIMIT,
            _ => return Err(QuantityError::Overflow(text.to_string())),
        };
        // A binary quantity below one unit is decimal (ParseQuantity: "avoids rounding").
        let format = if binary && magnitude > 0 && magnitude < NANOS_PER_UNIT as u128 {
            Format::DecimalSI
        } else {
            format
        };
        let nanos = magnitude as i128;
        Ok(Quantity {
            nanos: if parts.negative { -nanos } else { nanos },
            format,
        })
    }

    /// The value in whole units, rounded up, away from zero (bytes for memory, count for
    /// pods), as `Value()` of the int64 form `ParseQuantity` gives; saturating where
    /// `Value()` would wrap.
    pub fn value(&self) -> i64 {
        scaled(self.nanos, NANOS_PER_UNIT)
    }

    /// The value in thousandths, rounded up, away from zero (millicores for CPU), as
    /// `MilliValue()`; saturating where it would wrap.
    pub fn milli_value(&self) -> i64 {
        scaled(self.nanos, 1_000_000)
    }

    /// How resource.Quantity would print this one: from its suffix, or of a sum, its
    /// first non-zero term's.
    pub fn format(&self) -> Format {
        self.format
    }
}

/// `nanos` in units of `unit` nano-units, rounded away from zero, saturated to i64.
fn scaled(nanos: i128, unit: i128) -> i64 {
    let magnitude = ceil_div(nanos.unsigned_abs().min(i128::MAX as u128) as i128, unit);
    let v = if nanos < 0 { -magnitude } else { magnitude };
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };
    pub const ONE: Quantity = Quantity {
        nanos: NANOS_PER_UNIT,
        format: Format::DecimalSI,
    };

    /// Saturating, as amounts come from users' objects. The sum prints as `Add`'s: in
    /// this one's format, or the other's when this one is zero.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.is_zero() {
                other.format
            } else {
                self.format
            },
        }
    }

    #[cfg(test)]
    pub(crate) fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: self.format,
        }
    }

    /// `percent` of this quantity, rounded up to a whole nano-unit.
    pub(crate) fn scaled_percent(self, percent: i64) -> Quantity {
        let scaled = self.nanos.saturating_mul(i128::from(percent));
        Quantity {
            nanos: ceil_div(scaled, 100),
            format: self.format,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// As `resource.Quantity` prints itself in binary suffixes (`binary`) or decimal SI
    /// ones: see [`Quantity::canonical_in`].
    pub fn canonical(&self, binary: bool) -> String {
        self.canonical_in(if binary {
            Format::BinarySI
        } else {
            Format::DecimalSI
        })
    }

    /// As `resource.Quantity`'s `String()` prints a computed quantity of `format`: binary
    /// suffixes (`Ki` … `Ei`) for a whole number of units of 1024 or more in magnitude
    /// (`1Ki`, `1025`); otherwise the mantissa with the largest exponent, a multiple of
    /// 3, that keeps it whole: a decimal suffix (`n` … `E`: `500m`, `2k`, `1500m`), or in
    /// the exponent format `e<exp>` (`1e3`, `1500e-6`, `15`).
    pub fn canonical_in(&self, format: Format) -> String {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let n = self.nanos.unsigned_abs();
        if n == 0 {
            return "0".into();
        }
        let unit = NANOS_PER_UNIT as u128;
        if format == Format::BinarySI && n >= 1024 * unit && n.is_multiple_of(unit) {
            let mut v = n / unit;
            let mut exp = 0;
            while exp < 6 && v.is_multiple_of(1024) {
                v /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return format!("{sign}{v}{suffix}");
        }
        // The mantissa in nano-units, raised a power of 1000 at a time while whole (the
        // SI suffixes stop at E, 10^18).
        let (mut m, mut exp) = (n, -9i64);
        while m.is_multiple_of(1000) && (format == Format::DecimalExponent || exp < 18) {
            m /= 1000;
            exp += 3;
        }
        let suffix = match (format, exp) {
            (Format::DecimalExponent, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            (_, e) => ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"][((e + 9) / 3) as usize]
                .to_string(),
        };
        format!("{sign}{m}{suffix}")
    }
}

impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.canonical(false))
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && (a > 0) == (b > 0) {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_the_suffixes_kubernetes_accepts() {
        let cases: &[(&str, i64, i64)] = &[
            ("1", 1, 1000),
            ("500m", 1, 500),
            ("1.5", 2, 1500),
            ("0.1", 1, 100),
            ("2k", 2000, 2_000_000),
            ("1Ki", 1024, 1_024_000),
            ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
            ("128Mi", 134_217_728, 134_217_728_000),
            ("1e3", 1000, 1_000_000),
            ("1E-3", 1, 1),
            ("100n", 1, 1),
            ("250u", 1, 1),
            ("0", 0, 0),
            ("-1", -1, -1000),
            ("+2", 2, 2000),
        ];
        for &(text, value, milli) in cases {
            assert_eq!(q(text).value(), value, "value of {text}");
            assert_eq!(q(text).milli_value(), milli, "milli value of {text}");
        }
    }

    #[test]
    fn sums_print_as_resource_quantity_prints_them() {
        let sum = q("1Gi").saturating_add(q("512Mi"));
        assert_eq!(sum.canonical(true), "1536Mi");
        assert_eq!(q("1").saturating_add(q("500m")).canonical(false), "1500m");
        assert_eq!(q("2000").canonical(false), "2k");
        assert_eq!(q("2").canonical(true), "2");
        assert_eq!(q("1.5").canonical(true), "1500m");
        assert_eq!(q("3").saturating_sub(q("4")).canonical(false), "-1");
        assert_eq!(Quantity::ZERO.canonical(true), "0");
        assert!(q("1m") > q("0"));
    }

    #[test]
    fn rejects_what_is_not_a_quantity() {
        for bad in [
            "", " ", "1x", "1.2.3", "1 Gi", "1e", "--1", "1K", "1Ki3", "1e1.5",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        // ParseQuantity's grammar lets every digit go: these are zero, as the API
        // server reads them.
        for zero in [
            "m", "Gi", "Ti", ".", "-", "+", "-.", "0.0Ki", "-n", "e-9", "0Ei",
        ] {
            assert_eq!(q(zero), Quantity::ZERO, "{zero:?}");
        }
        for digitless in ["Pi", "Ei", ".Ei", "-e-10"] {
            assert!(Quantity::parse(digitless).is_err(), "{digitless:?}");
        }
        assert_eq!(q("1.").value(), 1);
        assert_eq!(q(".5").milli_value(), 500);
        assert!(matches!(
            Quantity::parse("99999999999999999999999E"),
            Err(QuantityError::Overflow(_))
        ));
        // Binary quantities are capped at int64's maximum of units, as resource.Quantity.
        assert_eq!(q("99999999999999999999999Ei").value(), i64::MAX);
        assert_eq!(q("-16Ei").value(), -i64::MAX);
        assert_eq!(q("-9223372036854775808").value(), i64::MIN);
        assert!(Quantity::parse("9223372036854775808").is_err());
    }

    #[test]
    fn negative_values_round_away_from_zero() {
        assert_eq!(q("-1.5").value(), -2);
        assert_eq!(q("-0.5").value(), -1);
        assert_eq!(q("-1.5m").milli_value(), -2);
        assert_eq!(q("-1n").value(), -1);
    }

    #[test]
    fn fractions_of_any_length_round_up_exactly() {
        let long = format!("1.{}1", "0".repeat(60));
        assert_eq!(q(&long).canonical(false), "1000000001n");
        assert_eq!(
            q(&format!("0.{}1Ki", "0".repeat(40))).canonical(false),
            "1n"
        );
        assert_eq!(q("0.0001Ki").canonical(false), "102400u");
        assert_eq!(q("0.0001Ki").format(), Format::DecimalSI);
    }

    #[test]
    fn prints_in_its_own_format() {
        let own = |s: &str| {
            let v = q(s);
            v.canonical_in(v.format())
        };
        assert_eq!(own("1e3"), "1e3");
        assert_eq!(own("1500"), "1500");
        assert_eq!(own("1.5e-3"), "1500e-6");
        assert_eq!(own("15e0"), "15");
        assert_eq!(own("1000Ki"), "1000Ki");
        assert_eq!(own("1.5Gi"), "1536Mi");
        // Below 1024 a binary quantity prints in decimal SI.
        assert_eq!(q("1000").canonical(true), "1k");
        assert_eq!(q("1025").canonical(true), "1025");
        // A sum takes its first non-zero term's format.
        assert_eq!(
            Quantity::ZERO.saturating_add(q("1Ki")).format(),
            Format::BinarySI
        );
        assert_eq!(q("1").saturating_add(q("1Ki")).format(), Format::DecimalSI);
    }

    #[test]
    fn extreme_exponents_neither_panic_nor_wrap() {
        for huge in [
            "1e2147483640",
            "1e2147483647",
            "0.5e2147483647",
            "-1e2147483647",
        ] {
            assert_eq!(
                Quantity::parse(huge),
                Err(QuantityError::Overflow(huge.to_string())),
                "{huge}"
            );
        }
        // Tiny values round up to the smallest unit, as Value() rounds them.
        assert_eq!(q("1e-2147483648").value(), 1);
        assert_eq!(q("0.1e-2147483648").milli_value(), 1);
        assert_eq!(q("0e2147483647"), Quantity::ZERO);
        // The exponent is an int64 kept as an int32, as Go converts it: it wraps.
        assert_eq!(q("1e2147483648").value(), 1, "1e-2147483648");
        assert_eq!(q("1e4294967299").value(), 1000);
        assert!(
            Quantity::parse("1e9223372036854775808").is_err(),
            "beyond int64"
        );
    }
}
