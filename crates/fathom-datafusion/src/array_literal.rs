//! `[0.12, -0.5, ...]` in SQL as one list literal.
//!
//! DataFusion plans an array literal as `make_array(e1, ..., en)`: for a
//! 128-d query vector, 128 expressions that the SQL planner, the type
//! coercion pass and each projection's schema walk one by one, and whose
//! display names (128 `Float64(..)` each) are formatted again by every
//! pass, until the simplifier folds them into the one list it evaluates
//! to. That cost is most of what planning a vector search takes. This
//! planner, placed before DataFusion's, produces that folded list
//! directly when every element is a number literal: the same value and
//! type as the folding gives (`List(Float64)` when any element is a
//! float, `List(Int64)` when all are integers; items nullable, named
//! `item`). Anything else (columns, NULLs, strings, nested lists) is left
//! to DataFusion's planner unchanged.

use std::sync::Arc;

use arrow_array::ListArray;
use arrow_array::types::{Float64Type, Int64Type};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult};

/// Plans number-only array literals as one `List` literal.
#[derive(Debug, Default)]
pub struct NumberArrayPlanner;

/// The list literal of `exprs` when all are non-null Int64 / Float64
/// literals.
pub fn number_list(exprs: &[Expr]) -> Option<ScalarValue> {
    if exprs.is_empty() {
        return None;
    }
    let mut any_float = false;
    for e in exprs {
        match e {
            Expr::Literal(ScalarValue::Float64(Some(_)), None) => any_float = true,
            Expr::Literal(ScalarValue::Int64(Some(_)), None) => {}
            _ => return None,
        }
    }
    let list = if any_float {
        let vals = exprs.iter().map(|e| match e {
            Expr::Literal(ScalarValue::Float64(Some(v)), _) => Some(*v),
            Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(*v as f64),
            _ => unreachable!("checked above"),
        });
        ListArray::from_iter_primitive::<Float64Type, _, _>([Some(vals)])
    } else {
        let vals = exprs.iter().map(|e| match e {
            Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(*v),
            _ => unreachable!("checked above"),
        });
        ListArray::from_iter_primitive::<Int64Type, _, _>([Some(vals)])
    };
    Some(ScalarValue::List(Arc::new(list)))
}

impl ExprPlanner for NumberArrayPlanner {
    fn plan_array_literal(
        &self,
        exprs: Vec<Expr>,
        _schema: &DFSchema,
    ) -> Result<PlannerResult<Vec<Expr>>> {
        Ok(match number_list(&exprs) {
            Some(v) => PlannerResult::Planned(Expr::Literal(v, None)),
            None => PlannerResult::Original(exprs),
        })
    }
}

/// Whether `ctx` already has the planner first.
fn installed(planners: &[Arc<dyn ExprPlanner>]) -> bool {
    planners
        .first()
        .is_some_and(|p| format!("{p:?}") == format!("{NumberArrayPlanner:?}"))
}

/// Puts [`NumberArrayPlanner`] before the session's expression planners
/// (DataFusion asks them in order; the first to plan wins).
pub fn install(ctx: &datafusion::prelude::SessionContext) {
    let state = ctx.state_ref();
    let mut state = state.write();
    if installed(state.expr_planners()) {
        return;
    }
    let mut planners: Vec<Arc<dyn ExprPlanner>> = vec![Arc::new(NumberArrayPlanner)];
    planners.extend(state.expr_planners().iter().cloned());
    *state =
        datafusion::execution::session_state::SessionStateBuilder::new_from_existing(state.clone())
            .with_expr_planners(planners)
            .build();
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    /// The planner gives the value and type DataFusion's own planning and
    /// folding give, for floats, integers, mixes and negatives; other
    /// literals still plan as before.
    #[tokio::test]
    async fn same_values_and_types_as_make_array() {
        let plain = SessionContext::new();
        let ours = SessionContext::new();
        install(&ours);
        install(&ours);
        assert_eq!(
            ours.state().expr_planners().len(),
            plain.state().expr_planners().len() + 1
        );
        // Before any optimization: one literal, not make_array.
        let unoptimized = |ctx: &SessionContext| {
            let state = ctx.state();
            async move {
                let p = state
                    .create_logical_plan("SELECT [0.5, -1, 2.0]")
                    .await
                    .unwrap();
                format!("{}", p.display_indent())
            }
        };
        assert!(unoptimized(&plain).await.contains("make_array"));
        let o = unoptimized(&ours).await;
        assert!(!o.contains("make_array") && o.contains("List("), "{o}");
        for lit in [
            "[0.5, -1.25, 3.0]",
            "[1, 2, -3]",
            "[1, 2.5, -3]",
            "[1e3, -0.0, 9007199254740993]",
            "[1, NULL, 2.5]",
            "['a', 'b']",
            "[[1, 2], [3, 4]]",
            "[1, 'a']",
        ] {
            let sql = format!("SELECT {lit} AS v, arrow_typeof({lit}) AS t");
            let want = match plain.sql(&sql).await {
                Ok(d) => d.collect().await,
                Err(e) => Err(e),
            };
            let got = match ours.sql(&sql).await {
                Ok(d) => d.collect().await,
                Err(e) => Err(e),
            };
            match (want, got) {
                (Ok(w), Ok(g)) => {
                    let text = |b: &[datafusion::arrow::array::RecordBatch]| {
                        datafusion::arrow::util::pretty::pretty_format_batches(b)
                            .unwrap()
                            .to_string()
                    };
                    assert_eq!(text(&w), text(&g), "{lit}");
                    assert_eq!(w[0].schema().field(0), g[0].schema().field(0), "{lit}");
                }
                (Err(_), Err(_)) => {}
                (w, g) => panic!("{lit}: {:?} vs {:?}", w.is_ok(), g.is_ok()),
            }
        }
    }
}
