//! The agent's logs, on stderr, as kube's components write theirs (component-base's
//! `-v` and `--logging-format`): text by default, or one JSON object per line with
//! component-base's keys (`ts`, `caller`, `msg`, `v`, `err`, then the event's fields) for
//! log pipelines that parse JSON.

use std::fmt::{self, Write as _};
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// `--logging-format`'s values, component-base's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The logging flags, as kube-scheduler takes them (plus `--log`, tracing's filter).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogOptions {
    /// Log filter in tracing's EnvFilter syntax, refining -v per target
    /// (`mcsched_agent::multicluster=debug`); a bare level in it replaces -v's. RUST_LOG,
    /// when set, overrides both.
    #[arg(long = "log", value_name = "FILTER", value_parser = parse_filter)]
    pub filter: Option<String>,

    /// Number for the log level verbosity, as kube's components take it (-v=N or --v=N):
    /// 0 to 3 log errors, warnings and info, 4 adds debug, 5 and above trace (klog's
    /// debug and trace levels).
    #[arg(short = 'v', long = "v", default_value_t = 0, value_name = "LEVEL")]
    pub verbosity: u32,

    /// Sets the log format, as kube's components: text, or json (one object per line
    /// with component-base's keys: ts in milliseconds since the epoch, caller, msg, v,
    /// err, and the event's fields).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub logging_format: LogFormat,
}

/// `--log`'s check: a directive EnvFilter would skip silently is an error at startup,
/// named after the flag by clap.
fn parse_filter(s: &str) -> Result<String, String> {
    EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("not a tracing filter: {e}"))
}

/// The most verbose level `-v=N` lets through: klog's V(4) is debug and V(5) trace
/// (Kubernetes' logging conventions); tracing has nothing between info and debug.
pub fn level_for(verbosity: u32) -> LevelFilter {
    match verbosity {
        0..=3 => LevelFilter::INFO,
        4 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// The `v` component-base writes for an event of `level`; errors carry none (zapr logs
/// them at error level, not at a verbosity).
fn klog_v(level: &Level) -> Option<u32> {
    match *level {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(4),
        Level::TRACE => Some(5),
    }
}

/// The filter in force: `rust_log` (RUST_LOG) when it parses, else -v's level refined by
/// `--log`'s directives (later directives for the same target replace earlier ones).
pub fn filter(opts: &LogOptions, rust_log: Option<&str>) -> EnvFilter {
    if let Some(env) = rust_log.filter(|s| !s.trim().is_empty())
        && let Ok(f) = EnvFilter::builder().parse(env)
    {
        return f;
    }
    let mut directives = level_for(opts.verbosity).to_string();
    if let Some(log) = &opts.filter {
        directives.push(',');
        directives.push_str(log);
    }
    EnvFilter::builder().parse_lossy(directives)
}

/// Installs the global subscriber. Colours only on a terminal: `kubectl logs` and log
/// files get plain `key=value` text, or JSON.
pub fn init(opts: &LogOptions) {
    let filter = filter(opts, std::env::var("RUST_LOG").ok().as_deref());
    match opts.logging_format {
        LogFormat::Text => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .try_init();
        }
        LogFormat::Json => {
            if tracing::subscriber::set_global_default(json_subscriber(filter, std::io::stderr))
                .is_ok()
            {
                log_panics();
            }
        }
    }
}

/// A subscriber writing component-base's JSON lines to `writer`.
pub fn json_subscriber<W>(filter: EnvFilter, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .fmt_fields(JsonFields)
        .event_format(Json)
        .finish()
}

/// A panic's default report is several lines of text; in JSON mode it is one error
/// event (kept even when `observe::panics` recovers the attempt), with the backtrace
/// under `stacktrace` (zap's key) when RUST_BACKTRACE asks for one.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let message = super::panics::message(info.payload());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("<unnamed>");
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            tracing::error!(thread, location, stacktrace = %backtrace, err = %message, "panic");
        } else {
            tracing::error!(thread, location, err = %message, "panic");
        }
    }));
}

/// component-base's JSON line: `{"ts":…,"caller":"dir/file.rs:N","msg":…,"v":N,…}`.
pub struct Json;

/// Span fields as JSON members (`"k":v,…`), kept per span by the fmt layer and written
/// into each event inside it, as zapr writes a logger's WithValues.
pub struct JsonFields;

impl<'w> FormatFields<'w> for JsonFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut v = Fields::default();
        fields.record(&mut v);
        let mut out = String::new();
        if let Some(m) = v.message.take() {
            v.members.insert(0, ("msg", serde_json::Value::String(m)));
        }
        members(&mut out, v.members.iter());
        writer.write_str(out.strip_prefix(',').unwrap_or(&out))
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        if !current.fields.is_empty() {
            current.fields.push(',');
        }
        self.format_fields(current.as_writer(), fields)
    }
}

impl<S> FormatEvent<S, JsonFields> for Json
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = String::with_capacity(256);
        line.push_str("{\"ts\":");
        line.push_str(&number(epoch_millis()));
        if let (Some(file), Some(n)) = (meta.file(), meta.line()) {
            line.push_str(",\"caller\":");
            line.push_str(&quoted(&format!("{}:{n}", short_caller(file))));
        }
        line.push_str(",\"msg\":");
        line.push_str(&quoted(fields.message.as_deref().unwrap_or("")));
        let v = klog_v(meta.level());
        if let Some(v) = v {
            let _ = write!(line, ",\"v\":{v}");
        }
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(f) = ext.get::<FormattedFields<JsonFields>>()
                    && !f.fields.is_empty()
                {
                    line.push(',');
                    line.push_str(&f.fields);
                }
            }
        }
        // ErrorS writes its error last.
        let err = if v.is_none() {
            fields
                .members
                .iter()
                .position(|(k, _)| *k == "err")
                .map(|i| fields.members.remove(i))
        } else {
            None
        };
        members(&mut line, fields.members.iter().chain(err.iter()));
        line.push('}');
        writeln!(writer, "{line}")
    }
}

fn epoch_millis() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as f64 / 1e6)
        .unwrap_or(0.0)
}

/// zap's short caller: the file's directory and name.
fn short_caller(file: &str) -> &str {
    let mut slashes = file.rmatch_indices('/');
    match (slashes.next(), slashes.next()) {
        (Some(_), Some((i, _))) => &file[i + 1..],
        _ => file,
    }
}

fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn number(f: f64) -> String {
    serde_json::Value::from(f).to_string()
}

/// Appends `,"key":value` for each member.
fn members<'a>(out: &mut String, m: impl Iterator<Item = &'a (&'static str, serde_json::Value)>) {
    for (k, v) in m {
        out.push(',');
        out.push_str(&quoted(k));
        out.push(':');
        out.push_str(&v.to_string());
    }
}

/// An event's or span's fields as JSON values, in their order; `error` is written as
/// `err`, the key component-base's ErrorS uses.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    members: Vec<(&'static str, serde_json::Value)>,
}

impl Fields {
    fn push(&mut self, field: &Field, value: serde_json::Value) {
        let name = match field.name() {
            "error" => "err",
            n => n,
        };
        self.members.push((name, value));
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = Some(value.to_string());
        } else {
            self.push(field, value.into());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = Some(text);
        } else {
            self.push(field, text.into());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        // The whole chain, as an error's Error() string in Go carries its wrapped ones.
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(s) = source {
            let _ = write!(text, ": {s}");
            source = s.source();
        }
        self.push(field, text.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'w self) -> Buffer {
            self.clone()
        }
    }

    fn opts(verbosity: u32, filter: Option<&str>) -> LogOptions {
        LogOptions {
            filter: filter.map(String::from),
            verbosity,
            logging_format: LogFormat::Json,
        }
    }

    /// A JSON object's members in the order written (serde_json's Map sorts them).
    #[derive(Debug)]
    struct Ordered(Vec<(String, serde_json::Value)>);

    impl<'de> serde::Deserialize<'de> for Ordered {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Ordered;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> Result<Ordered, A::Error> {
                    let mut out = Vec::new();
                    while let Some(kv) = m.next_entry()? {
                        out.push(kv);
                    }
                    Ok(Ordered(out))
                }
            }
            d.deserialize_map(V)
        }
    }

    impl std::ops::Index<&str> for Ordered {
        type Output = serde_json::Value;
        fn index(&self, key: &str) -> &serde_json::Value {
            self.get(key).unwrap_or(&serde_json::Value::Null)
        }
    }

    impl Ordered {
        fn get(&self, key: &str) -> Option<&serde_json::Value> {
            self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
        }
    }

    /// The lines `f` logs through the JSON subscriber, each parsed as one JSON object.
    fn json_lines(o: &LogOptions, f: impl FnOnce()) -> Vec<Ordered> {
        let buf = Buffer::default();
        tracing::subscriber::with_default(json_subscriber(filter(o, None), buf.clone()), f);
        let bytes = buf.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let text = String::from_utf8(bytes).expect("utf-8");
        text.lines()
            .map(|l| match serde_json::from_str::<Ordered>(l) {
                Ok(m) => m,
                Err(e) => panic!("not a JSON object: {l:?} ({e})"),
            })
            .collect()
    }

    fn keys(m: &Ordered) -> Vec<&str> {
        m.0.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[derive(Debug, thiserror::Error)]
    #[error("TokenReview failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn json_lines_have_component_bases_keys_and_the_fields() {
        let before = epoch_millis();
        let lines = json_lines(&opts(4, None), || {
            tracing::info!(
                pod = "ns/web",
                attempts = 3_u64,
                bound = true,
                "pod \"bound\"\nto node"
            );
            tracing::warn!(kind = "pod", error = %"timed out", "watch failed; retrying");
            let e = Outer(std::io::Error::other("connection refused"));
            tracing::error!(
                error = &e as &dyn std::error::Error,
                point = "bind",
                "binding failed"
            );
            let span = tracing::info_span!("leaf", cluster = "east");
            span.in_scope(|| tracing::debug!(node = "n1", "leaf node seen"));
            tracing::trace!("not at -v=4");
        });
        let after = epoch_millis();
        assert_eq!(lines.len(), 4, "{lines:?}");
        for l in &lines {
            let ts = l["ts"].as_f64().expect("ts is a number");
            assert!((before..=after).contains(&ts), "ts {ts} in milliseconds");
            let caller = l["caller"].as_str().expect("caller");
            assert!(caller.starts_with("observe/telemetry.rs:"), "{caller}");
        }
        let info = &lines[0];
        assert_eq!(
            keys(info),
            ["ts", "caller", "msg", "v", "pod", "attempts", "bound"]
        );
        assert_eq!(info["msg"], "pod \"bound\"\nto node");
        assert_eq!(info["v"], 0);
        assert_eq!(info["pod"], "ns/web");
        assert_eq!(info["attempts"], 3);
        assert_eq!(info["bound"], true);
        let warn = &lines[1];
        assert_eq!(keys(warn), ["ts", "caller", "msg", "v", "kind", "err"]);
        assert_eq!(warn["v"], 0);
        assert_eq!(warn["err"], "timed out");
        let error = &lines[2];
        assert_eq!(
            keys(error),
            ["ts", "caller", "msg", "point", "err"],
            "no v, err last"
        );
        assert_eq!(error["err"], "TokenReview failed: connection refused");
        let debug = &lines[3];
        assert_eq!(keys(debug), ["ts", "caller", "msg", "v", "cluster", "node"]);
        assert_eq!(debug["v"], 4);
        assert_eq!(debug["cluster"], "east", "the span's fields");
    }

    #[test]
    fn verbosity_and_the_log_filter_pick_the_levels() {
        let levels = |o: LogOptions| -> Vec<serde_json::Value> {
            json_lines(&o, || {
                tracing::info!("i");
                tracing::debug!("d");
                tracing::trace!("t");
            })
            .into_iter()
            .map(|l| l.get("v").cloned().unwrap_or_default())
            .collect()
        };
        assert_eq!(levels(opts(0, None)), [0]);
        assert_eq!(levels(opts(3, None)), [0]);
        assert_eq!(levels(opts(4, None)), [0, 4]);
        assert_eq!(levels(opts(9, None)), [0, 4, 5]);
        // --log refines -v per target; a bare level in it replaces -v's.
        let here = module_path!();
        assert_eq!(levels(opts(0, Some(&format!("{here}=trace")))), [0, 4, 5]);
        assert_eq!(
            levels(opts(9, Some("warn"))),
            Vec::<serde_json::Value>::new()
        );
        // RUST_LOG wins over both.
        let buf = Buffer::default();
        let f = filter(&opts(9, None), Some("error"));
        tracing::subscriber::with_default(json_subscriber(f, buf.clone()), || tracing::info!("i"));
        assert!(buf.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty());
    }

    #[test]
    fn short_callers_are_zaps() {
        assert_eq!(
            short_caller("agent/src/control/watch.rs"),
            "control/watch.rs"
        );
        assert_eq!(short_caller("src/lib.rs"), "src/lib.rs");
        assert_eq!(short_caller("lib.rs"), "lib.rs");
    }

    #[test]
    fn bad_values_name_their_flag() {
        use clap::Parser;
        let parse = |args: &[&str]| {
            crate::args::Args::try_parse_from(
                std::iter::once("mcsched-agent").chain(args.iter().copied()),
            )
        };
        let err = |args: &[&str]| match parse(args) {
            Ok(_) => panic!("{args:?} accepted"),
            Err(e) => e.to_string(),
        };
        let e = err(&["--logging-format=xml"]);
        assert!(
            e.contains("--logging-format") && e.contains("text, json"),
            "{e}"
        );
        let e = err(&["-v=high"]);
        assert!(e.contains("--v <LEVEL>"), "{e}");
        let e = err(&["--v=-1"]);
        assert!(e.contains("--v <LEVEL>"), "{e}");
        let e = err(&["--log=info,mcsched_agent=loud"]);
        assert!(e.contains("--log <FILTER>"), "{e}");
        for (args, v, format) in [
            (&["-v=4"][..], 4, LogFormat::Text),
            (&["--v=2", "--logging-format=json"][..], 2, LogFormat::Json),
            (
                &["-v", "5", "--logging-format", "text"][..],
                5,
                LogFormat::Text,
            ),
        ] {
            let a = parse(args).expect("parsed");
            assert_eq!(
                (a.log.verbosity, a.log.logging_format),
                (v, format),
                "{args:?}"
            );
        }
        let a = parse(&["--log=debug"]).expect("parsed");
        assert_eq!(a.log.filter.as_deref(), Some("debug"));
    }
}
