//! The cel crate resolves names only when it runs; cel-go, which kube uses, refuses an
//! expression naming an undeclared variable when it compiles. This finds such names in
//! the parsed expression and reports them as cel-go does.

use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// Names an expression may use besides comprehension variables: the device and the type
/// names of CEL's standard environment.
const DECLARED: &[&str] = &[
    "device",
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

pub fn check(program: &Program, source: &str) -> Result<(), String> {
    let mut undeclared = Vec::new();
    walk(program.expression(), &mut Vec::new(), &mut undeclared);
    if undeclared.is_empty() {
        return Ok(());
    }
    let errors: Vec<String> = undeclared
        .iter()
        .map(|(id, name)| {
            let start = program
                .source_info()
                .offset_for(*id)
                .map(|(s, _)| s as usize)
                .unwrap_or(0);
            describe(
                source,
                start,
                &format!("undeclared reference to '{name}' (in container '')"),
            )
        })
        .collect();
    Err(format!("compilation failed: {}", errors.join("\n")))
}

/// cel-go's error text: `ERROR: <input>:line:column: message`, then the line and a caret
/// under the column, indented with dots.
fn describe(source: &str, offset: usize, message: &str) -> String {
    let before: Vec<char> = source.chars().take(offset).collect();
    let line = before.iter().filter(|c| **c == '\n').count() + 1;
    let column = before.iter().rev().take_while(|c| **c != '\n').count();
    let text = source.lines().nth(line - 1).unwrap_or_default();
    format!(
        "ERROR: <input>:{line}:{}: {message}\n | {text}\n | {}^",
        column + 1,
        ".".repeat(column)
    )
}

fn walk(e: &IdedExpr, scope: &mut Vec<String>, out: &mut Vec<(u64, String)>) {
    match &e.expr {
        Expr::Ident(name) => {
            if !DECLARED.contains(&name.as_str()) && !scope.iter().any(|s| s == name) {
                out.push((e.id, name.clone()));
            }
        }
        Expr::Select(s) => walk(&s.operand, scope, out),
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                walk(t, scope, out);
            }
            c.args.iter().for_each(|a| walk(a, scope, out));
        }
        Expr::List(l) => l.elements.iter().for_each(|a| walk(a, scope, out)),
        Expr::Map(m) => {
            for en in &m.entries {
                match &en.expr {
                    EntryExpr::MapEntry(me) => {
                        walk(&me.key, scope, out);
                        walk(&me.value, scope, out);
                    }
                    EntryExpr::StructField(f) => walk(&f.value, scope, out),
                }
            }
        }
        Expr::Struct(s) => {
            for en in &s.entries {
                if let EntryExpr::StructField(f) = &en.expr {
                    walk(&f.value, scope, out);
                }
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, scope, out);
            walk(&c.accu_init, scope, out);
            let depth = scope.len();
            scope.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                scope.push(v.clone());
            }
            scope.push(c.accu_var.clone());
            walk(&c.loop_cond, scope, out);
            walk(&c.loop_step, scope, out);
            walk(&c.result, scope, out);
            scope.truncate(depth);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn undeclared_variables_fail_to_compile_with_cel_gos_text() {
        let cache = super::super::CelCache::new(4);
        let Err(err) = cache.get_or_compile("noSuchVar") else {
            panic!("compiled");
        };
        // kube's allocator test case invalid-CEL-one-device, as upstream prints it.
        assert_eq!(
            err,
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'noSuchVar' (in container '')\n | noSuchVar\n | ^"
        );
        let Err(err) = cache.get_or_compile("device.driver == 'a' && x") else {
            panic!("compiled");
        };
        assert!(
            err.ends_with(" | device.driver == 'a' && x\n | ........................^"),
            "{err}"
        );
        assert!(
            cache
                .get_or_compile("[1, 2].all(x, x > 0) && device.driver != ''")
                .is_ok()
        );
    }
}
