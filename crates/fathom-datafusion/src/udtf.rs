//! `lance_table('<uri>' [, version])`: a dataset (or an old version of it)
//! as a table in any query, without registering it.

use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;

use crate::factory::open_table;
use crate::provider::TableOptions;
use crate::util::block_on;

/// The `lance_table` table function.
#[derive(Debug, Default)]
pub struct LanceTableFunction;

fn literal(e: &Expr) -> Option<&ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v),
        _ => None,
    }
}

impl TableFunctionImpl for LanceTableFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let usage = || DataFusionError::Plan("usage: lance_table('<uri>' [, version])".into());
        let exprs = args.exprs();
        let uri = match exprs.first().and_then(literal) {
            Some(
                ScalarValue::Utf8(Some(s))
                | ScalarValue::LargeUtf8(Some(s))
                | ScalarValue::Utf8View(Some(s)),
            ) => s.clone(),
            _ => return Err(usage()),
        };
        // A version is a whole number: 1.5 or '2' is an error, not version 1 or 2.
        let version = match exprs.get(1) {
            None => None,
            Some(e) => match literal(e) {
                Some(v) if v.data_type().is_integer() && !v.is_null() => {
                    match v.cast_to(&arrow_schema::DataType::UInt64) {
                        Ok(ScalarValue::UInt64(Some(n))) => Some(n),
                        _ => {
                            return Err(DataFusionError::Plan(format!(
                                "lance_table: version must be a positive whole number, got {v}"
                            )));
                        }
                    }
                }
                Some(v) => {
                    return Err(DataFusionError::Plan(format!(
                        "lance_table: version must be a whole number, got {v} ({})",
                        v.data_type()
                    )));
                }
                None => return Err(usage()),
            },
        };
        if exprs.len() > 2 {
            return Err(usage());
        }
        let table =
            block_on(
                async move { open_table(&uri, version, None, TableOptions::default()).await },
            )?;
        Ok(Arc::new(table))
    }
}
