//! shared/src/quantity.rs held to k8s.io/apimachinery's resource.Quantity: a few
//! thousand quantity strings (a fixed seed's random ones and the edge cases: signs,
//! leading zeros, fractions of any length, every suffix, exponents including ones Go's
//! int32 conversion wraps, overflow, whitespace, malformed text) and pairs of them go to
//! tests/quantity-oracle (Go, built here with `go build` at the apimachinery version
//! tests/controlplane pins), and mcsched's verdict on each must be Go's: parse error or
//! not, the canonical string, `Value()`, `MilliValue()`, the format, and for pairs
//! `Cmp` and `Add`'s sum.
//!
//! mcsched's values must be Go's exact value (the oracle computes it with inf.Dec)
//! rounded away from zero, as `ParseQuantity` rounds to nano-units and the int64 form's
//! `ScaledValue` rounds. Where that is not what Go's own `ScaledValue` returns, or where
//! mcsched cannot hold the value, the difference is one of these, each counted and
//! printed, nothing else:
//! - a decimal quantity whose value does not fit int64 units: Go keeps it as an
//!   arbitrary-precision decimal (its `Value()` then wraps), mcsched refuses it as too
//!   large; where the exact value does not fit int64, mcsched saturates;
//! - a negative value in Go's inf.Dec form (long or binary fractions, some sums): its
//!   `scaledValue` truncates and adds one (`-1.5` → `0`), and wraps when the value's
//!   nano-units exceed int64 (it guards only positive ones), where mcsched does not.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mcsched_shared::quantity::{Format, Quantity, QuantityError};

const SEED: u64 = 0x6b75_6265_5f71_7479;
const RANDOM_SINGLES: usize = 3000;
const RANDOM_PAIRS: usize = 1500;

/// splitmix64: a fixed sequence, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn digits(&mut self, max: usize) -> String {
        let n = self.below(max + 1);
        (0..n)
            .map(|_| char::from(b'0' + self.below(10) as u8))
            .collect()
    }
}

const SUFFIXES: &[&str] = &[
    "", "", "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
];
const BAD_SUFFIXES: &[&str] = &[
    "K", "i", "KI", "mi", "ki", "x", "e", "e+", "E-", "Kii", " Ki", "iK", "mm", "Ki1", "e1.5",
    "e 3", "ee3", "b", "%", "µ",
];

/// A random quantity string, mostly well-formed, with an exponent Go evaluates quickly
/// (its inf.Dec arithmetic is as slow as 10^exponent is long, so the int32 extremes are
/// left to quantity.rs's own tests).
fn random_quantity(r: &mut Rng) -> String {
    let sign = r.pick(&["", "", "", "-", "+"]);
    let int = match r.below(10) {
        0 => String::new(),
        1 => format!("000{}", r.digits(3)),
        2..=3 => r.digits(25),
        _ => r.digits(4),
    };
    let frac = match r.below(6) {
        0..=2 => String::new(),
        3 => ".".to_string(),
        4 => format!(".{}", r.digits(4)),
        _ => format!(".{}", r.digits(45)),
    };
    let suffix = match r.below(12) {
        0 => r.pick(BAD_SUFFIXES).to_string(),
        1..=2 => {
            let e = r.pick(&["e", "E"]);
            let exp: i64 = match r.below(6) {
                0 => r.below(400) as i64 - 200,
                // Wraps to a small int32, as Go converts the int64 it reads.
                1 => (r.below(5) as i64 - 2) * (1 << 32) + r.below(40) as i64 - 20,
                _ => r.below(60) as i64 - 30,
            };
            let plus = if exp >= 0 && r.below(4) == 0 { "+" } else { "" };
            format!("{e}{plus}{exp}")
        }
        _ => r.pick(SUFFIXES).to_string(),
    };
    let mut s = format!("{sign}{int}{frac}{suffix}");
    match r.below(40) {
        0 => s = format!(" {s}"),
        1 => s = format!("{s}  "),
        2 => s = format!("\u{a0}{s}"),
        3 => s.insert(s.len() / 2, 'x'),
        _ => {}
    }
    s
}

const EDGES: &[&str] = &[
    "0",
    "-0",
    "+0",
    "00",
    "0.0",
    ".",
    "-",
    "+",
    "-.",
    "m",
    "Gi",
    "1.",
    ".5",
    "1.G",
    "1.5",
    "-1.5",
    "-0.5",
    "-1.5m",
    "-1n",
    "1n",
    "0.1n",
    "1u",
    "1m",
    "1k",
    "1M",
    "1G",
    "1T",
    "1P",
    "1E",
    "1Ki",
    "1Mi",
    "1Gi",
    "1Ti",
    "1Pi",
    "1Ei",
    "7Ei",
    "8Ei",
    "16Ei",
    "-16Ei",
    "0.5Ki",
    "0.0001Ki",
    "1023",
    "1024",
    "1025",
    "1000",
    "1000Ki",
    "1.5Gi",
    "128Mi",
    "-1.5Ki",
    "1e3",
    "1E3",
    "1e+3",
    "1e-3",
    "1e03",
    "15e0",
    "1.5e-3",
    "1500",
    "9E",
    "9.223372036854775807E",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775807",
    "-9223372036854775808",
    "9223372036854775807.5",
    "9223372036854775806.0000000001",
    "9223372036854775807999m",
    "9223372036854775808000m",
    "99999999999999999999999",
    "99999999999999999999999E",
    "99999999999999999999999Ei",
    "1e18",
    "1e19",
    "9.3e18",
    "1e4294967296",
    "1e4294967299",
    "1e-4294967290",
    "1e400",
    "1e-400",
    "123456789.123456789",
    "0.000000001",
    "0.0000000001",
    "0.0000000015",
    "1.0000000000000000000000000000000000000000000000000000000000001",
    "0.00000000000000000000000000000000000000001Ki",
    "",
    " ",
    "1x",
    "1.2.3",
    "1 Gi",
    "1e",
    "--1",
    "1K",
    "1Ki3",
    "1e1.5",
    " 1Gi ",
    "\u{a0}2",
    "+-1",
    "1e9223372036854775808",
];

/// Go's verdict on one quantity: None for a parse error.
#[derive(Debug, Clone, PartialEq)]
struct GoQuantity {
    string: String,
    value: GoValue,
    milli: GoValue,
    format: String,
}

/// `ScaledValue()`, and the exact value rounded away from zero; None: beyond int64.
#[derive(Debug, Clone, Copy, PartialEq)]
struct GoValue {
    go: Option<i64>,
    exact: Option<i64>,
}

fn go_value(go: &str, exact: &str) -> Result<GoValue, String> {
    let num = |w: &str| -> Result<Option<i64>, String> {
        if w == "big" {
            return Ok(None);
        }
        w.parse().map(Some).map_err(|e| format!("{w:?}: {e}"))
    };
    Ok(GoValue {
        go: num(go)?,
        exact: num(exact)?,
    })
}

fn go_quantity(field: &str) -> Result<Option<GoQuantity>, String> {
    let words: Vec<&str> = field.split(' ').collect();
    match words.as_slice() {
        ["err"] => Ok(None),
        ["ok", s, v, ve, m, me, f] => Ok(Some(GoQuantity {
            string: s.to_string(),
            value: go_value(v, ve)?,
            milli: go_value(m, me)?,
            format: f.to_string(),
        })),
        _ => Err(format!("oracle printed {field:?}")),
    }
}

fn format_name(f: Format) -> &'static str {
    match f {
        Format::DecimalSI => "DecimalSI",
        Format::BinarySI => "BinarySI",
        Format::DecimalExponent => "DecimalExponent",
    }
}

#[derive(Default)]
struct Tally {
    compared: usize,
    overflow_refused: usize,
    saturated: usize,
    dec_negative_rounding: usize,
    wrong: Vec<String>,
}

impl Tally {
    /// One of Value()/MilliValue() against Go's: mcsched's must be the exact value
    /// rounded away from zero (saturated beyond int64, where Go's wraps). Go's own
    /// ScaledValue departs from that only for negative values in its inf.Dec form.
    fn value(&mut self, what: &str, input: &str, go: GoValue, ours: i64, negative: bool) {
        match go.exact {
            None if ours == i64::MAX || ours == i64::MIN => self.saturated += 1,
            None => self.wrong.push(format!(
                "{input:?}: {what}: beyond int64, mcsched's {ours} is not saturated"
            )),
            Some(e) if e != ours => self.wrong.push(format!(
                "{input:?}: {what}: Go {} (exactly {e}), mcsched {ours}",
                go.go.map_or("big".to_string(), |g| g.to_string())
            )),
            Some(e) if go.go == Some(e) => {}
            Some(_) if negative => self.dec_negative_rounding += 1,
            Some(e) => self.wrong.push(format!(
                "{input:?}: {what}: Go's ScaledValue {:?} is not its exact {e}",
                go.go
            )),
        }
    }

    fn quantity(
        &mut self,
        input: &str,
        go: &Option<GoQuantity>,
        ours: &Result<Quantity, QuantityError>,
    ) {
        self.compared += 1;
        match (go, ours) {
            (None, Err(_)) => {}
            (None, Ok(q)) => self.wrong.push(format!(
                "{input:?}: Go refuses it, mcsched reads {}",
                q.canonical_in(q.format())
            )),
            (Some(g), Err(QuantityError::Overflow(_))) if g.value.exact.is_none() => {
                self.overflow_refused += 1
            }
            (Some(g), Err(e)) => self
                .wrong
                .push(format!("{input:?}: Go reads {}, mcsched: {e}", g.string)),
            (Some(g), Ok(q)) => {
                let s = q.canonical_in(q.format());
                if s != g.string {
                    self.wrong
                        .push(format!("{input:?}: String(): Go {}, mcsched {s}", g.string));
                }
                if format_name(q.format()) != g.format {
                    self.wrong.push(format!(
                        "{input:?}: format: Go {}, mcsched {}",
                        g.format,
                        format_name(q.format())
                    ));
                }
                let negative = *q < Quantity::ZERO;
                self.value("Value()", input, g.value, q.value(), negative);
                self.value("MilliValue()", input, g.milli, q.milli_value(), negative);
            }
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The version of k8s.io/apimachinery a go.mod builds with: its replace target, else
/// its require line.
fn apimachinery_in(go_mod: &Path) -> Option<String> {
    const M: &str = "k8s.io/apimachinery";
    let text = std::fs::read_to_string(go_mod).ok()?;
    let (mut required, mut replaced) = (None, None);
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["replace", m, "=>", t, v] | [m, "=>", t, v] if *m == M && *t == M => {
                replaced = Some(v.to_string())
            }
            ["require", m, v] | [m, v] if *m == M => required = Some(v.to_string()),
            _ => {}
        }
    }
    replaced.or(required)
}

#[test]
fn the_oracle_uses_the_control_planes_apimachinery() {
    let oracle = apimachinery_in(&repo().join("tests/quantity-oracle/go.mod"));
    let control_plane = apimachinery_in(&repo().join("tests/controlplane/go.mod"));
    assert!(
        oracle.is_some(),
        "tests/quantity-oracle/go.mod requires no apimachinery"
    );
    assert_eq!(
        oracle, control_plane,
        "tests/quantity-oracle must build with the apimachinery tests/controlplane pins"
    );
}

/// tests/quantity-oracle built into this test's target directory.
fn build_oracle() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quantity-oracle");
    let status = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(repo().join("tests/quantity-oracle"))
        .status()
        .unwrap_or_else(|e| {
            panic!("running `go build` for tests/quantity-oracle (is Go installed?): {e}")
        });
    assert!(
        status.success(),
        "`go build` of tests/quantity-oracle failed (its modules come with \
         `make controlplane`, which downloads k8s.io/apimachinery): {status}"
    );
    out
}

fn run_oracle(oracle: &Path, lines: &[String]) -> Vec<String> {
    let mut child = Command::new(oracle)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", oracle.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = lines.join("\n") + "\n";
    // Written from a thread: the oracle answers as it reads, and a full stdout pipe
    // would block it while this one still writes.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("oracle output");
    writer
        .join()
        .expect("writer thread")
        .expect("writing to the oracle");
    assert!(out.status.success(), "the oracle failed: {}", out.status);
    let text = String::from_utf8(out.stdout).expect("UTF-8 from the oracle");
    let answers: Vec<String> = text.lines().map(str::to_string).collect();
    assert_eq!(answers.len(), lines.len(), "one answer per line");
    answers
}

#[test]
fn quantities_read_print_and_add_as_go_resource_quantity() {
    let oracle = build_oracle();
    let mut r = Rng(SEED);
    let mut singles: Vec<String> = EDGES.iter().map(|s| s.to_string()).collect();
    singles.extend((0..RANDOM_SINGLES).map(|_| random_quantity(&mut r)));
    // Pairs: well-formed ones mostly (random ones are mostly so), edge cases among them.
    let mut pairs: Vec<(String, String)> = (0..RANDOM_PAIRS)
        .map(|_| {
            let one = |r: &mut Rng| {
                if r.below(4) == 0 {
                    r.pick(EDGES).to_string()
                } else {
                    random_quantity(r)
                }
            };
            (one(&mut r), one(&mut r))
        })
        .collect();
    pairs.push(("0".into(), "1Ki".into()));
    pairs.push(("1Ki".into(), "-1Ki".into()));
    pairs.push(("1.5".into(), "-3".into()));
    pairs.push(("8Ei".into(), "8Ei".into()));
    // Tabs and newlines frame the oracle's lines; none is generated, but make sure.
    assert!(
        singles
            .iter()
            .chain(pairs.iter().flat_map(|(a, b)| [a, b]))
            .all(|s| !s.contains(['\t', '\n', '\r']))
    );

    let mut lines = singles.clone();
    lines.extend(pairs.iter().map(|(a, b)| format!("{a}\t{b}")));
    let answers = run_oracle(&oracle, &lines);

    let mut tally = Tally::default();
    for (input, answer) in singles.iter().zip(&answers) {
        let go = go_quantity(answer).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        tally.quantity(input, &go, &Quantity::parse(input));
    }
    let mut pair_compared = 0;
    for ((a, b), answer) in pairs.iter().zip(&answers[singles.len()..]) {
        let fields: Vec<&str> = answer.split('\t').collect();
        let (ga, gb) = match (fields.first(), fields.get(1)) {
            (Some(x), Some(y)) => (go_quantity(x), go_quantity(y)),
            _ => panic!("{a:?}, {b:?}: oracle printed {answer:?}"),
        };
        let (ga, gb) = (ga.expect("oracle"), gb.expect("oracle"));
        let (qa, qb) = (Quantity::parse(a), Quantity::parse(b));
        tally.quantity(a, &ga, &qa);
        tally.quantity(b, &gb, &qb);
        let (Ok(qa), Ok(qb)) = (qa, qb) else {
            continue;
        };
        let Some(ops) = fields.get(2) else {
            tally
                .wrong
                .push(format!("{a:?} + {b:?}: mcsched reads both, Go does not"));
            continue;
        };
        pair_compared += 1;
        let words: Vec<&str> = ops.split(' ').collect();
        let [cmp, sum_string, v, ve, m, me] = words.as_slice() else {
            panic!("{a:?}, {b:?}: oracle printed {answer:?}");
        };
        let (sum_value, sum_milli) = match (go_value(v, ve), go_value(m, me)) {
            (Ok(v), Ok(m)) => (v, m),
            _ => panic!("{a:?}, {b:?}: oracle printed {answer:?}"),
        };
        let ours_cmp = match qa.cmp(&qb) {
            std::cmp::Ordering::Less => "-1",
            std::cmp::Ordering::Equal => "0",
            std::cmp::Ordering::Greater => "1",
        };
        let label = format!("{a} + {b}");
        if *cmp != ours_cmp {
            tally
                .wrong
                .push(format!("{a:?} vs {b:?}: Cmp: Go {cmp}, mcsched {ours_cmp}"));
        }
        let sum = qa.saturating_add(qb);
        let ours = sum.canonical_in(sum.format());
        if ours != *sum_string {
            tally.wrong.push(format!(
                "{label:?}: String(): Go {sum_string}, mcsched {ours}"
            ));
        }
        let negative = sum < Quantity::ZERO;
        tally.value("Value()", &label, sum_value, sum.value(), negative);
        tally.value(
            "MilliValue()",
            &label,
            sum_milli,
            sum.milli_value(),
            negative,
        );
    }

    eprintln!(
        "{} quantities and {} sums compared with Go's resource.Quantity: {} disagreements; \
         allowed: {} too large for mcsched (Go keeps big decimals), {} values saturated \
         where Go's wrap, {} negative values Go's inf.Dec form rounds otherwise",
        tally.compared,
        pair_compared,
        tally.wrong.len(),
        tally.overflow_refused,
        tally.saturated,
        tally.dec_negative_rounding
    );
    assert!(pair_compared > RANDOM_PAIRS / 4, "too few sums compared");
    // Each difference once (an edge case may come back in a pair).
    let mut seen = std::collections::HashSet::new();
    tally.wrong.retain(|w| seen.insert(w.clone()));
    const SHOWN: usize = 40;
    assert!(
        tally.wrong.is_empty(),
        "{} disagreements with Go's resource.Quantity (first {}):\n{}",
        tally.wrong.len(),
        SHOWN.min(tally.wrong.len()),
        tally.wrong[..SHOWN.min(tally.wrong.len())].join("\n")
    );
}
