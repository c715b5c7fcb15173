//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`) as integers, rounded up the way
//! `resource.Quantity`'s `Value()` and `MilliValue()` round.

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

/// A parsed quantity held in nano-units, enough for every suffix Kubernetes accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity {
    nanos: i128,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

impl Quantity {
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let s = text.trim();
        if s.is_empty() {
            return Err(QuantityError::Empty(text.to_string()));
        }
        let malformed = || QuantityError::Malformed(text.to_string());
        let overflow = || QuantityError::Overflow(text.to_string());
        let (negative, s) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(malformed());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let mut digits: i128 = 0;
        for c in int_part.chars().chain(frac_part.chars()) {
            let d = i128::from(c as u8 - b'0');
            digits = digits
                .checked_mul(10)
                .and_then(|v| v.checked_add(d))
                .ok_or_else(overflow)?;
        }
        // value = digits * 10^exp10 * 2^exp2. The exponent is user input up to i32's
        // range (`1e2147483647`): summed in i64, where neither the fraction's digits nor
        // the suffix can overflow it.
        let mut exp10: i64 = -(frac_part.len() as i64);
        let mut exp2: u32 = 0;
        match suffix {
            "" => {}
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            "Ki" => exp2 = 10,
            "Mi" => exp2 = 20,
            "Gi" => exp2 = 30,
            "Ti" => exp2 = 40,
            "Pi" => exp2 = 50,
            "Ei" => exp2 = 60,
            other => {
                let exp = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(malformed)?;
                // resource.Quantity reads the exponent as an int32.
                let exp: i32 = exp.parse().map_err(|_| malformed())?;
                exp10 += i64::from(exp);
            }
        }
        let scaled = digits.checked_shl(exp2).ok_or_else(overflow)?;
        if exp2 > 0 && scaled >> exp2 != digits {
            return Err(overflow());
        }
        // Shift to nano-units, rounding up what falls below a nano-unit. Zero stays zero
        // whatever its exponent.
        let shift = exp10 + 9;
        let nanos = if scaled == 0 {
            0
        } else if shift >= 0 {
            u32::try_from(shift)
                .ok()
                .and_then(|shift| 10i128.checked_pow(shift))
                .and_then(|m| scaled.checked_mul(m))
                .ok_or_else(overflow)?
        } else {
            match u32::try_from(-shift)
                .ok()
                .and_then(|shift| 10i128.checked_pow(shift))
            {
                Some(div) => ceil_div(scaled, div),
                None => 1,
            }
        };
        if nanos > i128::from(i64::MAX) * NANOS_PER_UNIT {
            return Err(overflow());
        }
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
        })
    }

    /// The value in whole units, rounded up (bytes for memory, count for pods).
    pub fn value(&self) -> i64 {
        ceil_div(self.nanos, NANOS_PER_UNIT) as i64
    }

    /// The value in thousandths, rounded up (millicores for CPU).
    pub fn milli_value(&self) -> i64 {
        ceil_div(self.nanos, 1_000_000).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

impl Quantity {
    pub const ZERO: Quantity = Quantity { nanos: 0 };
    pub const ONE: Quantity = Quantity {
        nanos: NANOS_PER_UNIT,
    };

    /// Saturating, as amounts come from users' objects.
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }

    #[cfg(test)]
    pub(crate) fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
        }
    }

    /// `percent` of this quantity, rounded up to a whole nano-unit.
    pub(crate) fn scaled_percent(self, percent: i64) -> Quantity {
        let scaled = self.nanos.saturating_mul(i128::from(percent));
        Quantity {
            nanos: ceil_div(scaled, 100),
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// As `resource.Quantity` prints itself: in binary suffixes (`Ki` … `Ei`) when
    /// `binary` and the value is a whole multiple of one, else with the largest decimal
    /// suffix (`n` … `E`) that keeps it whole: `2`, `500m`, `1Gi`, `1500m`, `2k`.
    pub fn canonical(&self, binary: bool) -> String {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let n = self.nanos.unsigned_abs();
        if n == 0 {
            return "0".into();
        }
        if binary && n.is_multiple_of(NANOS_PER_UNIT as u128) {
            let v = n / NANOS_PER_UNIT as u128;
            for (shift, suffix) in [
                (60, "Ei"),
                (50, "Pi"),
                (40, "Ti"),
                (30, "Gi"),
                (20, "Mi"),
                (10, "Ki"),
            ] {
                if v.is_multiple_of(1u128 << shift) {
                    return format!("{sign}{}{suffix}", v >> shift);
                }
            }
            return format!("{sign}{v}");
        }
        for (exp, suffix) in [
            (27u32, "E"),
            (24, "P"),
            (21, "T"),
            (18, "G"),
            (15, "M"),
            (12, "k"),
            (9, ""),
            (6, "m"),
            (3, "u"),
        ] {
            let unit = 10u128.pow(exp);
            if n.is_multiple_of(unit) {
                return format!("{sign}{}{suffix}", n / unit);
            }
        }
        format!("{sign}{n}n")
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
        for bad in ["", "m", "1x", "1.2.3", "Gi", "1 Gi", "1e", "--1", "."] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(
            Quantity::parse("99999999999999999999999Ei"),
            Err(QuantityError::Overflow(_))
        ));
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
        assert!(Quantity::parse("1e2147483648").is_err(), "beyond int32");
    }
}
