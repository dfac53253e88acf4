//! Filters compiled to SQLite: JSON1 (`json_each`, `json_extract`,
//! `json_type`) over the row's `tags` and `payload`, every value a bound
//! parameter, never spliced into the text. The typed filter tree and its
//! in-memory evaluation (`Filter::matches`, the reference this compiler is
//! tested against) live in `filter.rs`.

use rusqlite::types::Value as V;

use crate::filter::{Cond, Field, Filter, Op, Scalar, positive};

/// `f` as a SQL boolean expression over columns prefixed by `alias` (e.g.
/// `"m."`), its values pushed onto `params`. The expression is never NULL.
pub(super) fn filter_sql(f: &Filter, alias: &str, params: &mut Vec<V>) -> String {
    match f {
        Filter::And(v) if v.is_empty() => "1".into(),
        Filter::And(v) => format!(
            "({})",
            v.iter()
                .map(|f| filter_sql(f, alias, params))
                .collect::<Vec<_>>()
                .join(" AND ")
        ),
        Filter::Or(v) => format!(
            "({})",
            v.iter()
                .map(|f| filter_sql(f, alias, params))
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
        Filter::Cond(c) => cond_sql(c, alias, params),
    }
}

fn cond_sql(cond: &Cond, alias: &str, params: &mut Vec<V>) -> String {
    let op = positive(cond.op);
    let bind = |s: &Scalar, params: &mut Vec<V>| {
        params.push(match s {
            Scalar::Text(t) => V::Text(t.clone()),
            Scalar::Int(i) => V::Integer(*i),
            Scalar::Real(r) => V::Real(*r),
            Scalar::Bool(b) => V::Integer(*b as i64),
            Scalar::Null => V::Null,
        });
        "?".to_string()
    };
    let sym = match op {
        Op::Gt => ">",
        Op::Gte => ">=",
        Op::Lt => "<",
        Op::Lte => "<=",
        _ => "=",
    };
    let pos = match &cond.field {
        Field::Tags => {
            let list: Vec<String> = cond.values.iter().map(|v| bind(v, params)).collect();
            if op == Op::All {
                let distinct: std::collections::BTreeSet<_> =
                    cond.values.iter().map(|v| format!("{v:?}")).collect();
                format!(
                    "((SELECT COUNT(DISTINCT value) FROM json_each({alias}tags) WHERE value IN ({})) = {})",
                    list.join(","),
                    distinct.len()
                )
            } else if list.is_empty() {
                "0".into()
            } else {
                format!(
                    "EXISTS (SELECT 1 FROM json_each({alias}tags) WHERE value IN ({}))",
                    list.join(",")
                )
            }
        }
        Field::Payload(path) => {
            let json_path = path
                .iter()
                .map(|s| {
                    if s.chars().all(|c| c.is_ascii_digit()) {
                        format!("[{s}]")
                    } else {
                        format!(".\"{s}\"")
                    }
                })
                .collect::<String>();
            let json_path = format!("${json_path}");
            let ty = |params: &mut Vec<V>| {
                params.push(V::Text(json_path.clone()));
                format!("json_type({alias}payload, ?)")
            };
            if cond.values.first() == Some(&Scalar::Null) {
                let t1 = ty(params);
                let t2 = ty(params);
                format!("({t1} IS NULL OR {t2} = 'null')")
            } else {
                let parts: Vec<String> = cond
                    .values
                    .iter()
                    .map(|v| {
                        let t = ty(params);
                        let guard = match v {
                            Scalar::Text(_) => format!("{t} = 'text'"),
                            Scalar::Int(_) | Scalar::Real(_) => {
                                format!("{t} IN ('integer','real')")
                            }
                            Scalar::Bool(true) => return format!("{t} = 'true'"),
                            Scalar::Bool(false) => return format!("{t} = 'false'"),
                            Scalar::Null => unreachable!(),
                        };
                        params.push(V::Text(json_path.clone()));
                        // Payload numbers compare as doubles, as in memory
                        // and on PostgreSQL (`::float8`): SQLite compares
                        // integers exactly, so `2^53 + 1 > 2^53` held here
                        // alone (found by the `filter` fuzz target).
                        if let Some(x) = v.as_f64() {
                            params.push(V::Real(x));
                            return format!(
                                "({guard} AND CAST(json_extract({alias}payload, ?) AS REAL) {sym} ?)"
                            );
                        }
                        let b = bind(v, params);
                        format!("({guard} AND json_extract({alias}payload, ?) {sym} {b})")
                    })
                    .collect();
                if parts.is_empty() {
                    "0".into()
                } else {
                    format!("({})", parts.join(" OR "))
                }
            }
        }
        Field::Text(c) | Field::Num(c) | Field::Time(c) | Field::Bool(c) => {
            let col = format!("{alias}{c}");
            if cond.values.first() == Some(&Scalar::Null) {
                format!("({col} IS NULL)")
            } else if matches!(op, Op::In) {
                if cond.values.is_empty() {
                    "0".into()
                } else {
                    let list: Vec<String> = cond.values.iter().map(|v| bind(v, params)).collect();
                    format!("({col} IN ({}))", list.join(","))
                }
            } else {
                let b = bind(&cond.values[0], params);
                format!("({col} {sym} {b})")
            }
        }
    };
    let pos = format!("COALESCE({pos}, 0)");
    if cond.op.is_negative() {
        format!("(NOT {pos})")
    } else {
        pos
    }
}
