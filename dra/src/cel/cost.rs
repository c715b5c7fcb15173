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

/// The estimate: (cost, largest size of the value) of `expr`.
pub fn estimate(expr: &IdedExpr) -> u64 {
    walk(expr).0
}

fn walk(e: &IdedExpr) -> (u64, u64) {
    match &e.expr {
        Expr::Unspecified => (0, 0),
        Expr::Ident(_) => (1, MAX_DEVICE_COLLECTION),
        Expr::Literal(LiteralValue::String(s)) => (1, s.inner().len() as u64),
        Expr::Literal(_) => (1, 1),
        Expr::Select(s) => {
            let (c, _) = walk(&s.operand);
            (c.saturating_add(1), MAX_DEVICE_COLLECTION.max(MAX_STRING))
        }
        Expr::List(l) => {
            let cost = l
                .elements
                .iter()
                .fold(1u64, |acc, el| acc.saturating_add(walk(el).0));
            (cost, l.elements.len() as u64)
        }
        Expr::Map(m) => {
            let cost = m.entries.iter().fold(1u64, |acc, en| {
                let c = match &en.expr {
                    EntryExpr::MapEntry(me) => walk(&me.key).0.saturating_add(walk(&me.value).0),
                    EntryExpr::StructField(sf) => walk(&sf.value).0,
                };
                acc.saturating_add(c)
            });
            (cost, m.entries.len() as u64)
        }
        Expr::Struct(s) => {
            let cost = s.entries.iter().fold(1u64, |acc, en| {
                let c = match &en.expr {
                    EntryExpr::MapEntry(me) => walk(&me.key).0.saturating_add(walk(&me.value).0),
                    EntryExpr::StructField(sf) => walk(&sf.value).0,
                };
                acc.saturating_add(c)
            });
            (cost, 1)
        }
        Expr::Call(call) => {
            let mut cost = 1u64;
            let mut sizes = Vec::new();
            if let Some(t) = &call.target {
                let (c, s) = walk(t);
                cost = cost.saturating_add(c);
                sizes.push(s);
            }
            for a in &call.args {
                let (c, s) = walk(a);
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
            let (range_cost, range_size) = walk(&c.iter_range);
            let (init_cost, _) = walk(&c.accu_init);
            let (cond_cost, _) = walk(&c.loop_cond);
            let (step_cost, step_size) = walk(&c.loop_step);
            let (result_cost, _) = walk(&c.result);
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
}
