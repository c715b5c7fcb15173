//! kubectl's output formats for `get`: `-o json|yaml|wide|name|jsonpath=…|custom-columns=…`
//! and `--no-headers`, printed as kubectl's printers print a list.

use std::str::FromStr;

use clap::Args;
use jsonpath_rust::JsonPath;
use serde::Serialize;
use serde_json::Value;

/// The formats in the words of kubectl's error, sorted as it sorts them.
const ALLOWED: &str = "custom-columns,json,jsonpath,name,wide,yaml";

#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    Table,
    Wide,
    Json,
    Yaml,
    Name,
    JsonPath(Vec<Node>),
    CustomColumns(Vec<Column>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error(
        "unable to match a printer suitable for the output format {0:?}, allowed formats are: {ALLOWED}"
    )]
    Unknown(String),
    #[error("template format specified but no template given")]
    NoTemplate,
    #[error("custom-columns format specified but no custom columns given")]
    NoColumns,
    #[error("unexpected custom-columns spec: {0}, expected <header>:<json-path-expr>")]
    Column(String),
    #[error(
        "unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{{name1.name2}}' or '{{.name1.name2}}'"
    )]
    ColumnPath,
    #[error("jsonpath template {template:?}: {reason}")]
    Template { template: String, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    #[error("error executing jsonpath {path:?}: {reason}")]
    Path { path: String, reason: String },
    #[error("printing JSON")]
    Json(#[from] serde_json::Error),
    #[error("printing YAML")]
    Yaml(#[from] mcsched_shared::yaml::YamlError),
}

impl FromStr for OutputFormat {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<Self, FormatError> {
        let (name, value) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        match (name, value) {
            ("wide", None) => Ok(Self::Wide),
            ("json", None) => Ok(Self::Json),
            ("yaml", None) => Ok(Self::Yaml),
            ("name", None) => Ok(Self::Name),
            ("jsonpath", v) => match v.filter(|v| !v.is_empty()) {
                Some(t) => Ok(Self::JsonPath(parse_template(t)?)),
                None => Err(FormatError::NoTemplate),
            },
            ("custom-columns", v) => match v.filter(|v| !v.is_empty()) {
                Some(spec) => Ok(Self::CustomColumns(parse_columns(spec)?)),
                None => Err(FormatError::NoColumns),
            },
            _ => Err(FormatError::Unknown(s.to_string())),
        }
    }
}

/// `-o` and `--no-headers` of a `get`.
#[derive(Debug, Clone, Args)]
pub struct PrintArgs {
    /// Output format. One of: (json, yaml, name, jsonpath, custom-columns, wide).
    #[arg(short = 'o', long, value_name = "FORMAT", value_parser = OutputFormat::from_str)]
    pub output: Option<OutputFormat>,
    /// When using the default or custom-column output format, don't print headers (default print headers).
    #[arg(long)]
    pub no_headers: bool,
}

impl PrintArgs {
    pub fn format(&self) -> &OutputFormat {
        self.output.as_ref().unwrap_or(&OutputFormat::Table)
    }

    /// The formats that print nothing but a table, which kubectl replaces with "No resources
    /// found" on stderr when there are no items.
    pub fn is_table(&self) -> bool {
        matches!(
            self.format(),
            OutputFormat::Table | OutputFormat::Wide | OutputFormat::CustomColumns(_)
        )
    }
}

/// One listed thing as every format shows it.
#[derive(Debug, Clone)]
pub struct Item {
    /// What `-o json|yaml|jsonpath|custom-columns` read.
    pub object: Value,
    /// `kind.group` in lower case, as `-o name` prints it before the name.
    pub resource: String,
    pub name: String,
    /// The default table's cells, then `-o wide`'s extra ones.
    pub cells: Vec<String>,
    pub wide: Vec<String>,
}

/// The headers of the default table and of `-o wide`'s extra columns.
pub struct Columns<'a> {
    pub headers: &'a [&'a str],
    pub wide: &'a [&'a str],
}

pub fn print(
    format: &OutputFormat,
    no_headers: bool,
    columns: &Columns<'_>,
    items: &[Item],
) -> Result<String, PrintError> {
    let header = |wide: bool| -> Vec<String> {
        let mut h: Vec<String> = columns.headers.iter().map(|s| s.to_string()).collect();
        if wide {
            h.extend(columns.wide.iter().map(|s| s.to_string()));
        }
        h
    };
    match format {
        OutputFormat::Table | OutputFormat::Wide => {
            let wide = *format == OutputFormat::Wide;
            let mut rows = Vec::new();
            if !no_headers {
                rows.push(header(wide));
            }
            rows.extend(items.iter().map(|i| {
                let mut r = i.cells.clone();
                if wide {
                    r.extend(i.wide.iter().cloned());
                }
                r
            }));
            Ok(crate::table::render(&rows))
        }
        OutputFormat::Json => {
            let mut out = Vec::new();
            // kubectl's JSON printer indents by four spaces.
            let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
            let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
            list(items).serialize(&mut ser)?;
            out.push(b'\n');
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
        OutputFormat::Yaml => Ok(mcsched_shared::yaml::to_string(&list(items))?),
        OutputFormat::Name => Ok(items
            .iter()
            .map(|i| format!("{}/{}\n", i.resource, i.name))
            .collect()),
        OutputFormat::JsonPath(nodes) => {
            let mut out = String::new();
            execute(nodes, &list(items), &mut out)?;
            Ok(out)
        }
        OutputFormat::CustomColumns(cols) => {
            let mut rows = Vec::new();
            if !no_headers {
                rows.push(cols.iter().map(|c| c.header.clone()).collect());
            }
            for i in items {
                let mut row = Vec::new();
                for c in cols {
                    let found = query(&i.object, &c.path)?;
                    row.push(if found.is_empty() {
                        "<none>".to_string()
                    } else {
                        found.iter().map(|v| text(v)).collect::<Vec<_>>().join(",")
                    });
                }
                rows.push(row);
            }
            Ok(crate::table::render(&rows))
        }
    }
}

/// A list as kubectl prints one: `kind: List` of `apiVersion: v1`, whatever its items' kinds.
fn list(items: &[Item]) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": items.iter().map(|i| i.object.clone()).collect::<Vec<_>>(),
        "metadata": {"resourceVersion": ""},
    })
}

/// A piece of a kubectl JSONPath template.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Text(String),
    /// An RFC 9535 path (`$.items[*].metadata.name`), `$` being the current object.
    Path(String),
    /// `{range PATH}…{end}`: the body once per result of the path, each its current object.
    Range(String, Vec<Node>),
}

/// kubectl's `{.items[*].metadata.name}`, `{"\n"}`, `{range .items[*]}…{end}` and the text
/// between them.
pub fn parse_template(template: &str) -> Result<Vec<Node>, FormatError> {
    let fail = |reason: &str| FormatError::Template {
        template: template.to_string(),
        reason: reason.to_string(),
    };
    // Each open range's body, innermost last; the bottom one is the template's.
    let mut stack: Vec<(Option<String>, Vec<Node>)> = vec![(None, Vec::new())];
    let mut rest = template;
    while !rest.is_empty() {
        let Some(open) = rest.find('{') else {
            push(&mut stack, Node::Text(rest.to_string()));
            break;
        };
        if open > 0 {
            push(&mut stack, Node::Text(rest[..open].to_string()));
        }
        let action_start = &rest[open + 1..];
        let close = closing_brace(action_start).ok_or_else(|| fail("unclosed action"))?;
        let action = action_start[..close].trim();
        rest = &action_start[close + 1..];
        if action == "end" {
            if stack.len() == 1 {
                return Err(fail("{end} without {range}"));
            }
            let (path, body) = stack.pop().ok_or_else(|| fail("{end} without {range}"))?;
            push(&mut stack, Node::Range(path.unwrap_or_default(), body));
        } else if let Some(path) = action.strip_prefix("range ") {
            stack.push((Some(to_rfc_path(path.trim())), Vec::new()));
        } else if let Some(literal) = action.strip_prefix('"').and_then(|a| a.strip_suffix('"')) {
            push(&mut stack, Node::Text(unescape(literal)));
        } else if action.is_empty() {
            return Err(fail("empty action"));
        } else {
            // Several paths in one action print one after the other, as kubectl's.
            for path in action.split_whitespace() {
                push(&mut stack, Node::Path(to_rfc_path(path)));
            }
        }
    }
    if stack.len() != 1 {
        return Err(fail("{range} without {end}"));
    }
    Ok(stack.pop().map(|(_, nodes)| nodes).unwrap_or_default())
}

fn push(stack: &mut [(Option<String>, Vec<Node>)], node: Node) {
    if let Some((_, nodes)) = stack.last_mut() {
        nodes.push(node);
    }
}

/// The `}` closing an action, past those inside quoted strings (`{"}"}`, filters).
fn closing_brace(s: &str) -> Option<usize> {
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '}') => return Some(i),
            (None, _) => {}
        }
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// kubectl's paths start at `.`, `[` or `@` (the current object); RFC 9535's at `$`.
fn to_rfc_path(path: &str) -> String {
    if path.starts_with('$') {
        path.to_string()
    } else if let Some(rest) = path.strip_prefix('@') {
        format!("${rest}")
    } else if path.starts_with('.') || path.starts_with('[') {
        format!("${path}")
    } else {
        format!("$.{path}")
    }
}

fn query<'a>(value: &'a Value, path: &str) -> Result<Vec<&'a Value>, PrintError> {
    value.query(path).map_err(|e| PrintError::Path {
        path: path.to_string(),
        reason: e.to_string(),
    })
}

/// A result as kubectl prints it: a string as it is, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn execute(nodes: &[Node], current: &Value, out: &mut String) -> Result<(), PrintError> {
    for node in nodes {
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Path(p) => {
                let found = query(current, p)?;
                out.push_str(&found.iter().map(|v| text(v)).collect::<Vec<_>>().join(" "));
            }
            Node::Range(p, body) => {
                for each in query(current, p)? {
                    execute(body, each, out)?;
                }
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub header: String,
    /// An RFC 9535 path from the item.
    pub path: String,
}

/// `NAME:.metadata.name,READY:.status.ready`, each path in kubectl's relaxed forms
/// (`a.b`, `.a.b`, `{a.b}`, `{.a.b}`).
pub fn parse_columns(spec: &str) -> Result<Vec<Column>, FormatError> {
    spec.split(',')
        .map(|part| {
            let (header, path) = part
                .split_once(':')
                .ok_or_else(|| FormatError::Column(part.to_string()))?;
            let field = path.strip_prefix('{').unwrap_or(path);
            let field = field.strip_suffix('}').unwrap_or(field);
            let field = field.strip_prefix('.').unwrap_or(field);
            if field.is_empty() || field.contains(['{', '}']) {
                return Err(FormatError::ColumnPath);
            }
            Ok(Column {
                header: header.to_string(),
                path: format!("$.{field}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn items() -> Vec<Item> {
        let item = |name: &str, ready: &str, zone: &str| Item {
            object: json!({"kind": "Cluster", "metadata": {"name": name}, "status": {"ready": ready, "labels": ["a", "b"]}}),
            resource: "cluster.mcsched.io".into(),
            name: name.into(),
            cells: vec![name.into(), ready.into()],
            wide: vec![zone.into()],
        };
        vec![item("east", "True", "eu-1"), item("w", "Unknown", "-")]
    }

    const COLUMNS: Columns<'static> = Columns {
        headers: &["NAME", "READY"],
        wide: &["ZONE"],
    };

    fn printed(format: &str, no_headers: bool) -> String {
        let f: OutputFormat = format.parse().expect("format");
        print(&f, no_headers, &COLUMNS, &items()).expect("print")
    }

    #[test]
    fn tables_default_and_wide_with_or_without_headers() {
        let t = print(&OutputFormat::Table, false, &COLUMNS, &items()).expect("table");
        assert_eq!(t, "NAME   READY\neast   True\nw      Unknown\n");
        let t = print(&OutputFormat::Table, true, &COLUMNS, &items()).expect("table");
        assert_eq!(t, "east   True\nw      Unknown\n");
        assert_eq!(
            printed("wide", false),
            "NAME   READY     ZONE\neast   True      eu-1\nw      Unknown   -\n"
        );
    }

    #[test]
    fn json_and_yaml_are_a_list() {
        let j = printed("json", false);
        assert!(
            j.starts_with("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n"),
            "{j}"
        );
        let v: Value = serde_json::from_str(&j).expect("json");
        assert_eq!(v["kind"], "List");
        assert_eq!(v["items"][1]["metadata"]["name"], "w");
        assert_eq!(v["metadata"]["resourceVersion"], "");
        let y = printed("yaml", false);
        assert!(
            y.starts_with("apiVersion: v1\nitems:\n- kind: Cluster\n"),
            "{y}"
        );
        assert!(y.contains("\nkind: List\n"), "{y}");
        let v: Value = mcsched_shared::yaml::from_str(&y).expect("yaml");
        assert_eq!(v["items"][0]["status"]["ready"], "True");
        let empty = print(&OutputFormat::Json, false, &COLUMNS, &[]).expect("json");
        let v: Value = serde_json::from_str(&empty).expect("json");
        assert_eq!(v["items"], json!([]));
    }

    #[test]
    fn name_is_kind_group_slash_name() {
        assert_eq!(
            printed("name", false),
            "cluster.mcsched.io/east\ncluster.mcsched.io/w\n"
        );
    }

    #[test]
    fn jsonpath_as_kubectl_templates_it() {
        assert_eq!(
            printed("jsonpath={.items[*].metadata.name}", false),
            "east w"
        );
        assert_eq!(
            printed(
                r#"jsonpath={range .items[*]}{.metadata.name}{"\t"}{.status.ready}{"\n"}{end}"#,
                false
            ),
            "east\tTrue\nw\tUnknown\n"
        );
        assert_eq!(
            printed("jsonpath=first: {.items[0].metadata.name}!", false),
            "first: east!"
        );
        assert_eq!(
            printed(
                r#"jsonpath={.items[?(@.status.ready=="True")].metadata.name}"#,
                false
            ),
            "east"
        );
        assert_eq!(
            printed("jsonpath={.items[0].status.labels}", false),
            r#"["a","b"]"#
        );
        assert_eq!(printed("jsonpath={.items[*].nothing}", false), "");
        assert_eq!(printed("jsonpath={.kind}", false), "List");
        for bad in [
            "jsonpath={.items",
            "jsonpath={range .items[*]}{.a}",
            "jsonpath={end}",
        ] {
            let e = bad.parse::<OutputFormat>().expect_err(bad);
            assert!(matches!(e, FormatError::Template { .. }), "{bad}: {e}");
        }
        let f: OutputFormat = "jsonpath={.items[?(@.x==]}".parse().expect("parsed late");
        let e = print(&f, false, &COLUMNS, &items()).expect_err("no path");
        assert!(e.to_string().starts_with("error executing jsonpath"), "{e}");
    }

    #[test]
    fn custom_columns() {
        assert_eq!(
            printed(
                "custom-columns=NAME:.metadata.name,READY:{.status.ready},L:status.labels[*],X:.x",
                false
            ),
            "NAME   READY     L     X\neast   True      a,b   <none>\nw      Unknown   a,b   <none>\n"
        );
        assert_eq!(
            printed("custom-columns=N:.metadata.name", true),
            "east\nw\n"
        );
        assert_eq!(
            "custom-columns=NAME".parse::<OutputFormat>(),
            Err(FormatError::Column("NAME".into()))
        );
    }

    #[test]
    fn unknown_formats_name_the_allowed_ones() {
        let e = "table".parse::<OutputFormat>().expect_err("not kubectl's");
        assert_eq!(
            e.to_string(),
            "unable to match a printer suitable for the output format \"table\", allowed formats are: custom-columns,json,jsonpath,name,wide,yaml"
        );
        assert_eq!(
            "jsonpath".parse::<OutputFormat>(),
            Err(FormatError::NoTemplate)
        );
        assert_eq!(
            "custom-columns=".parse::<OutputFormat>(),
            Err(FormatError::NoColumns)
        );
        assert_eq!(
            "json=x".parse::<OutputFormat>(),
            Err(FormatError::Unknown("json=x".into()))
        );
    }
}
