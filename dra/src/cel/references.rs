//! The cel crate resolves names only when it runs; cel-go, which kube uses, refuses an
//! expression naming an undeclared variable or function when it compiles. This finds such
//! names in the parsed expression and reports them as cel-go does. Whether a function
//! exists is asked of the cel crate itself, by calling it without arguments: an unknown one
//! is an undeclared reference, a known one a missing overload.

use std::collections::BTreeMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, ExecutionError, Program};

/// Function namespaces (`strings.quote`, `optional.of`): a call's target, not a variable.
const NAMESPACES: &[&str] = &["strings", "optional"];

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

pub fn check(program: &Program, source: &str, env: &Env, root: &Context) -> Result<(), String> {
    let mut undeclared = Vec::new();
    let mut functions = BTreeMap::new();
    walk(
        program.expression(),
        &mut Vec::new(),
        &mut undeclared,
        &mut functions,
    );
    for (name, id) in functions {
        if !function_exists(&name, env, root) {
            undeclared.push((id, name));
        }
    }
    undeclared.sort_by_key(|(id, _)| {
        program
            .source_info()
            .offset_for(*id)
            .map(|(s, _)| s)
            .unwrap_or(0)
    });
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

fn function_exists(name: &str, env: &Env, root: &Context) -> bool {
    let undeclared = |src: &str| match env.compile(src) {
        Ok(p) => matches!(p.execute(root), Err(ExecutionError::UndeclaredReference(_))),
        Err(_) => true,
    };
    !(undeclared(&format!("{name}()")) && undeclared(&format!("0.{name}()")))
}

/// Collects undeclared variables into `out`, and each function called (by qualified name,
/// with its first call's id) into `functions`.
fn walk(
    e: &IdedExpr,
    scope: &mut Vec<String>,
    out: &mut Vec<(u64, String)>,
    functions: &mut BTreeMap<String, u64>,
) {
    match &e.expr {
        Expr::Ident(name) => {
            if !DECLARED.contains(&name.as_str()) && !scope.iter().any(|s| s == name) {
                out.push((e.id, name.clone()));
            }
        }
        Expr::Select(s) => walk(&s.operand, scope, out, functions),
        Expr::Call(c) => {
            let namespace = match c.target.as_deref().map(|t| &t.expr) {
                Some(Expr::Ident(n)) if NAMESPACES.contains(&n.as_str()) && !scope.contains(n) => {
                    Some(n.clone())
                }
                _ => None,
            };
            // Operators (`_+_`, `!_`, `@in`...) are the language's own.
            if !c.func_name.starts_with(['_', '@', '!']) {
                let qualified = match &namespace {
                    Some(ns) => format!("{ns}.{}", c.func_name),
                    None => c.func_name.clone(),
                };
                functions.entry(qualified).or_insert(e.id);
            }
            if let (Some(t), None) = (&c.target, &namespace) {
                walk(t, scope, out, functions);
            }
            c.args.iter().for_each(|a| walk(a, scope, out, functions));
        }
        Expr::List(l) => l
            .elements
            .iter()
            .for_each(|a| walk(a, scope, out, functions)),
        Expr::Map(m) => {
            for en in &m.entries {
                match &en.expr {
                    EntryExpr::MapEntry(me) => {
                        walk(&me.key, scope, out, functions);
                        walk(&me.value, scope, out, functions);
                    }
                    EntryExpr::StructField(f) => walk(&f.value, scope, out, functions),
                }
            }
        }
        Expr::Struct(s) => {
            for en in &s.entries {
                if let EntryExpr::StructField(f) = &en.expr {
                    walk(&f.value, scope, out, functions);
                }
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, scope, out, functions);
            walk(&c.accu_init, scope, out, functions);
            let depth = scope.len();
            scope.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                scope.push(v.clone());
            }
            scope.push(c.accu_var.clone());
            walk(&c.loop_cond, scope, out, functions);
            walk(&c.loop_step, scope, out, functions);
            walk(&c.result, scope, out, functions);
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

    #[test]
    fn unknown_functions_fail_to_compile_known_ones_do_not() {
        let cache = super::super::CelCache::new(8);
        let Err(err) = cache.get_or_compile("device.driver.noSuchFunction()") else {
            panic!("compiled");
        };
        assert!(
            err.contains("undeclared reference to 'noSuchFunction' (in container '')"),
            "{err}"
        );
        let Err(err) = cache.get_or_compile("noSuchGlobal(1) || true") else {
            panic!("compiled");
        };
        assert!(
            err.contains("undeclared reference to 'noSuchGlobal'"),
            "{err}"
        );
        // The cel crate's, its strings extension's and Kubernetes' functions, namespaced
        // or not.
        for known in [
            "device.driver.lowerAscii().matches('^a') || size(device.driver) > 0",
            "strings.quote(device.driver) != '' && optional.of(1).hasValue()",
            "quantity('1').isLessThan(quantity('2')) && semver('1.0.0').major() == 1",
            "int('1') == 1 && string(1) == '1' && type(1) == int && dyn(1) == 1",
        ] {
            let got = cache.get_or_compile(known);
            assert!(got.is_ok(), "{known}: {:?}", got.err());
        }
    }
}
