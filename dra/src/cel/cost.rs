//! A worst-case cost of a selector, in the spirit of cel-go's cost estimator: one unit per
//! node, comprehensions charged per iteration of their range's largest possible size. The
//! cel crate has no runtime cost tracking, so an expression whose worst case passes
//! `resourceapi.CELSelectorExpressionMaxCost` is refused before it runs; the API server
//! refuses such expressions when they are stored, by the same kind of estimate.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

/// A device has at most this many attributes and capacities together
/// (`resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice`), so no map or list
/// from the device is larger.
const MAX_DEVICE_COLLECTION: u64 = 32;
/// Longest string from a device (attribute values: `DeviceAttributeMaxValueLength`).
const MAX_STRING: u64 = 64;

/// The worst-case cost of `expr`. A variable or field may hold anything from the device or,
/// in a comprehension, an element of a literal of the expression, so its size is taken as
/// the larger of the two.
pub fn estimate(expr: &IdedExpr) -> u64 {
    let unknown = largest_literal(expr)
        .max(MAX_DEVICE_COLLECTION)
        .max(MAX_STRING);
    walk(expr, unknown).0
}

fn largest_literal(e: &IdedExpr) -> u64 {
    let mut largest = 0u64;
    visit(e, &mut |x| {
        let size = match &x.expr {
            Expr::List(l) => l.elements.len() as u64,
            Expr::Map(m) => m.entries.len() as u64,
            Expr::Literal(LiteralValue::String(s)) => s.inner().len() as u64,
            _ => 0,
        };
        largest = largest.max(size);
    });
    largest
}

fn visit(e: &IdedExpr, f: &mut dyn FnMut(&IdedExpr)) {
    f(e);
    match &e.expr {
        Expr::Select(s) => visit(&s.operand, f),
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                visit(t, f);
            }
            c.args.iter().for_each(|a| visit(a, f));
        }
        Expr::List(l) => l.elements.iter().for_each(|a| visit(a, f)),
        Expr::Map(m) => {
            for en in &m.entries {
                match &en.expr {
                    EntryExpr::MapEntry(me) => {
                        visit(&me.key, f);
                        visit(&me.value, f);
                    }
                    EntryExpr::StructField(sf) => visit(&sf.value, f),
                }
            }
        }
        Expr::Struct(st) => {
            for en in &st.entries {
                if let EntryExpr::StructField(sf) = &en.expr {
                    visit(&sf.value, f);
                }
            }
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                visit(x, f);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// (cost, largest size of the value) of `e`; `unknown`: the size of a variable or field.
fn walk(e: &IdedExpr, unknown: u64) -> (u64, u64) {
    match &e.expr {
        Expr::Unspecified => (0, 0),
        Expr::Ident(_) => (1, unknown),
        Expr::Literal(LiteralValue::String(s)) => (1, s.inner().len() as u64),
        Expr::Literal(_) => (1, 1),
        Expr::Select(s) => {
            let (c, _) = walk(&s.operand, unknown);
            (c.saturating_add(1), unknown)
        }
        Expr::List(l) => {
            let cost = l
                .elements
                .iter()
                .fold(1u64, |acc, el| acc.saturating_add(walk(el, unknown).0));
            (cost, l.elements.len() as u64)
        }
        Expr::Map(m) => {
            let cost = m.entries.iter().fold(1u64, |acc, en| {
                let c = match &en.expr {
                    EntryExpr::MapEntry(me) => walk(&me.key, unknown)
                        .0
                        .saturating_add(walk(&me.value, unknown).0),
                    EntryExpr::StructField(sf) => walk(&sf.value, unknown).0,
                };
                acc.saturating_add(c)
            });
            (cost, m.entries.len() as u64)
        }
        Expr::Struct(s) => {
            let cost = s.entries.iter().fold(1u64, |acc, en| {
                let c = match &en.expr {
                    EntryExpr::MapEntry(me) => walk(&me.key, unknown)
                        .0
                        .saturating_add(walk(&me.value, unknown).0),
                    EntryExpr::StructField(sf) => walk(&sf.value, unknown).0,
                };
                acc.saturating_add(c)
            });
            (cost, 1)
        }
        Expr::Call(call) => {
            let mut cost = 1u64;
            let mut sizes = Vec::new();
            if let Some(t) = &call.target {
                let (c, s) = walk(t, unknown);
                cost = cost.saturating_add(c);
                sizes.push(s);
            }
            for a in &call.args {
                let (c, s) = walk(a, unknown);
                cost = cost.saturating_add(c);
                sizes.push(s);
            }
            // Operations on strings and lists cost by the size of their operands, as cel-go
            // charges them; `+` concatenates, so its result is as large as both.
            let largest = sizes.iter().copied().max().unwrap_or(1);
            let total: u64 = sizes.iter().fold(0u64, |a, s| a.saturating_add(*s));
            let size = match call.func_name.as_str() {
                "_+_" => total,
                "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "_&&_" | "_||_" | "!_" => 1,
                _ => largest,
            };
            cost = cost.saturating_add(largest / 10);
            (cost, size.max(1))
        }
        Expr::Comprehension(c) => {
            let (range_cost, range_size) = walk(&c.iter_range, unknown);
            let (init_cost, _) = walk(&c.accu_init, unknown);
            let (cond_cost, _) = walk(&c.loop_cond, unknown);
            let (step_cost, step_size) = walk(&c.loop_step, unknown);
            let (result_cost, _) = walk(&c.result, unknown);
            let per_iteration = cond_cost.saturating_add(step_cost);
            let cost = range_cost
                .saturating_add(init_cost)
                .saturating_add(range_size.saturating_mul(per_iteration))
                .saturating_add(result_cost);
            // map() and filter() build a list as long as their range.
            (cost, range_size.max(step_size))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(src: &str) -> u64 {
        estimate(cel::Env::stdlib().compile(src).unwrap().expression())
    }

    #[test]
    fn nested_comprehensions_multiply() {
        let one = cost("[1,2,3,4,5,6,7,8,9,10].all(x, x > 0)");
        let two = cost("[1,2,3,4,5,6,7,8,9,10].all(x, [1,2,3,4,5,6,7,8,9,10].all(y, x + y > 0))");
        assert!(one < 500, "{one}");
        assert!(two > 10 * one, "{one} {two}");
    }

    #[test]
    fn comprehension_variables_may_hold_the_largest_literal() {
        let list = format!(
            "[{}]",
            (0..2000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let flat = cost(&format!("[{list}].all(x, true)"));
        // x is the whole list: its 2000 elements are iterated, at a few units each, not
        // the 32 a device's collections have at most.
        let nested = cost(&format!("[{list}].all(x, x.all(y, y >= 0))"));
        assert!(nested - flat > 3 * 2000, "{flat} {nested}");
    }
}
