//! Exact quantity arithmetic for counters, capacities and CEL's quantity functions, which
//! need subtraction, rounding to steps and signs (resource.Quantity's `Add`, `Sub`, `Cmp`,
//! `Value`, `MilliValue`, `Sign`). Parsing and printing follow mcsched-shared's quantity
//! grammar; values are held in nano-units, as resource.Quantity's int64 form scaled down
//! to its smallest suffix.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use mcsched_shared::quantity::Format;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}"
)]
pub struct QuantityError(pub String);

const NANOS: i128 = 1_000_000_000;

#[derive(Clone, Copy, Debug)]
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
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// resource.ParseQuantity's grammar and rounding (up to a whole nano-unit).
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError(text.to_string());
        let s = text.trim();
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_end);
        if number.is_empty() || number.matches('.').count() > 1 || number == "." {
            return Err(err());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let (exp10, binary_exp, format): (i32, u32, Format) = match suffix {
            "" => (0, 0, Format::DecimalSI),
            "n" => (-9, 0, Format::DecimalSI),
            "u" => (-6, 0, Format::DecimalSI),
            "m" => (-3, 0, Format::DecimalSI),
            "k" => (3, 0, Format::DecimalSI),
            "M" => (6, 0, Format::DecimalSI),
            "G" => (9, 0, Format::DecimalSI),
            "T" => (12, 0, Format::DecimalSI),
            "P" => (15, 0, Format::DecimalSI),
            "E" => (18, 0, Format::DecimalSI),
            "Ki" => (0, 10, Format::BinarySI),
            "Mi" => (0, 20, Format::BinarySI),
            "Gi" => (0, 30, Format::BinarySI),
            "Ti" => (0, 40, Format::BinarySI),
            "Pi" => (0, 50, Format::BinarySI),
            "Ei" => (0, 60, Format::BinarySI),
            other if other.starts_with(['e', 'E']) => {
                let e: i32 = other[1..].parse().map_err(|_| err())?;
                (e, 0, Format::DecimalExponent)
            }
            _ => return Err(err()),
        };
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        let mut exp = exp10 as i64 - frac_part.len() as i64 + 9;
        if digits.len() > 36 {
            return Err(err());
        }
        let mut value: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err())?
        };
        let mut round_up = false;
        while exp < 0 {
            if value % 10 != 0 {
                round_up = true;
            }
            value /= 10;
            exp += 1;
        }
        for _ in 0..exp {
            value = value.checked_mul(10).ok_or_else(err)?;
        }
        if binary_exp > 0 {
            value = value.checked_mul(1i128 << binary_exp).ok_or_else(err)?;
        }
        if round_up {
            value += 1;
        }
        Ok(Quantity {
            nanos: if negative { -value } else { value },
            format,
        })
    }

    pub fn from_api(q: &ApiQuantity) -> Result<Self, QuantityError> {
        Self::parse(&q.0)
    }

    pub fn from_int(v: i64, format: Format) -> Self {
        Quantity {
            nanos: i128::from(v) * NANOS,
            format,
        }
    }

    pub fn from_milli(v: i64, format: Format) -> Self {
        Quantity {
            nanos: i128::from(v) * 1_000_000,
            format,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    pub fn signum(&self) -> i64 {
        self.nanos.signum() as i64
    }

    /// `Value()`: whole units, rounded away from zero, saturated.
    pub fn value(&self) -> i64 {
        scaled(self.nanos, NANOS)
    }

    /// `MilliValue()`.
    pub fn milli_value(&self) -> i64 {
        scaled(self.nanos, 1_000_000)
    }

    /// Whether `Value()` is exact and within int64 (the CEL library's `isInteger`).
    pub fn is_integer(&self) -> bool {
        self.nanos % NANOS == 0
            && (self.nanos / NANOS) >= i128::from(i64::MIN)
            && (self.nanos / NANOS) <= i128::from(i64::MAX)
    }

    pub fn as_approximate_float(&self) -> f64 {
        self.nanos as f64 / NANOS as f64
    }

    pub fn to_api(self) -> ApiQuantity {
        ApiQuantity(self.to_string())
    }
}

fn scaled(nanos: i128, unit: i128) -> i64 {
    let q = nanos / unit;
    let q = if nanos % unit != 0 {
        q + nanos.signum()
    } else {
        q
    };
    q.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl std::fmt::Display for Quantity {
    /// resource.Quantity's canonical form in this quantity's format.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let n = self.nanos.unsigned_abs();
        if n == 0 {
            return f.write_str("0");
        }
        let unit = NANOS as u128;
        if self.format == Format::BinarySI && n >= 1024 * unit && n.is_multiple_of(unit) {
            let mut v = n / unit;
            let mut exp = 0;
            while exp < 6 && v.is_multiple_of(1024) {
                v /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return write!(f, "{sign}{v}{suffix}");
        }
        let (mut m, mut exp) = (n, -9i64);
        while m.is_multiple_of(1000) && (self.format == Format::DecimalExponent || exp < 18) {
            m /= 1000;
            exp += 3;
        }
        match (self.format, exp) {
            (Format::DecimalExponent, 0) => write!(f, "{sign}{m}"),
            (Format::DecimalExponent, e) => write!(f, "{sign}{m}e{e}"),
            (_, e) => {
                let suffix =
                    ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"][((e + 9) / 3) as usize];
                write!(f, "{sign}{m}{suffix}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_suffixes_and_compares_by_value() {
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("500m").milli_value(), 500);
        assert_eq!(q("1.5Gi").value(), 1610612736);
        assert_eq!(q("2e3"), q("2k"));
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("-1").signum(), -1);
        assert!(Quantity::parse("1X").is_err());
        assert!(Quantity::parse("").is_err());
    }

    #[test]
    fn arithmetic_and_printing() {
        assert_eq!(q("1Gi").saturating_sub(q("512Mi")).to_string(), "512Mi");
        assert_eq!(q("1").saturating_add(q("500m")).to_string(), "1500m");
        assert_eq!(q("1.5").value(), 2);
        assert!(!q("1.5").is_integer());
        assert!(q("2k").is_integer());
    }
}
