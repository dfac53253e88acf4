//! Filters compiled to PostgreSQL: tags are a `text[]` (`&&` for any-of,
//! `@>` for all-of), the payload is read with a strict SQL/JSON path
//! (`jsonb_path_query_first`, so an all-digit segment indexes arrays only,
//! never an object key, as `Filter::matches` walks it), numbers compare as
//! doubles as they do in memory. Every value is a bound parameter, never
//! spliced into the text; every positive condition is wrapped in
//! `COALESCE(…, FALSE)` so SQL's NULL never leaks into a `NOT`. The typed
//! filter tree and its in-memory evaluation (the reference this compiler is
//! tested against) live in `filter.rs`.

use super::sql::bind;
use super::*;
use crate::filter::{Cond, Field, Filter, Op, Scalar, positive};

/// `f` as a boolean expression over columns prefixed by `alias` (`"m."`),
/// its values pushed onto `params`. Never NULL.
pub(super) fn filter_sql(f: &Filter, alias: &str, params: &mut Vec<P>) -> String {
    match f {
        Filter::And(v) if v.is_empty() => "TRUE".into(),
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

/// A scalar as a double, for numeric comparisons (the in-memory evaluator
/// compares numbers as `f64`).
fn num(s: &Scalar) -> Option<f64> {
    match s {
        Scalar::Int(i) => Some(*i as f64),
        Scalar::Real(r) => Some(*r),
        _ => None,
    }
}

/// The strict SQL/JSON path of a payload path: `strict $."a"[0]`.
fn json_path(path: &[String]) -> String {
    let mut out = String::from("strict $");
    for s in path {
        if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{s}]"));
        } else {
            out.push_str(&format!(
                ".\"{}\"",
                s.replace('\\', "\\\\").replace('"', "\\\"")
            ));
        }
    }
    out
}

fn cond_sql(cond: &Cond, alias: &str, params: &mut Vec<P>) -> String {
    let op = positive(cond.op);
    let sym = match op {
        Op::Gt => ">",
        Op::Gte => ">=",
        Op::Lt => "<",
        Op::Lte => "<=",
        _ => "=",
    };
    let texts = |vals: &[Scalar]| -> Vec<String> {
        vals.iter()
            .filter_map(|v| match v {
                Scalar::Text(t) => Some(t.clone()),
                _ => None,
            })
            .collect()
    };
    let pos = match &cond.field {
        Field::Tags => {
            let list = bind(params, texts(&cond.values));
            if op == Op::All {
                format!("({alias}tags @> {list}::text[])")
            } else {
                format!("({alias}tags && {list}::text[])")
            }
        }
        Field::Payload(path) => {
            let p = bind(params, json_path(path));
            let v = format!(
                "jsonb_path_query_first({alias}payload::jsonb, {p}::text::jsonpath, '{{}}', TRUE)"
            );
            if cond.values.first() == Some(&Scalar::Null) {
                format!("({v} IS NULL OR jsonb_typeof({v}) = 'null')")
            } else {
                let parts: Vec<String> = cond
                    .values
                    .iter()
                    .map(|s| match s {
                        Scalar::Text(t) => {
                            let b = bind(params, t.clone());
                            format!(
                                "(jsonb_typeof({v}) = 'string' AND ({v} #>> '{{}}') COLLATE \"C\" {sym} {b}::text)"
                            )
                        }
                        Scalar::Int(_) | Scalar::Real(_) => {
                            let b = bind(params, num(s).unwrap_or(f64::NAN));
                            format!(
                                "(jsonb_typeof({v}) = 'number' AND ({v} #>> '{{}}')::float8 {sym} {b}::float8)"
                            )
                        }
                        Scalar::Bool(true) => format!("({v} = 'true'::jsonb)"),
                        Scalar::Bool(false) => format!("({v} = 'false'::jsonb)"),
                        Scalar::Null => "FALSE".into(),
                    })
                    .collect();
                if parts.is_empty() {
                    "FALSE".into()
                } else {
                    format!("({})", parts.join(" OR "))
                }
            }
        }
        Field::Text(c) | Field::Num(c) | Field::Time(c) | Field::Bool(c) => {
            let col = format!("{alias}{c}");
            if cond.values.first() == Some(&Scalar::Null) {
                format!("({col} IS NULL)")
            } else {
                match &cond.field {
                    Field::Text(_) if op == Op::In => {
                        let l = bind(params, texts(&cond.values));
                        format!("({col} = ANY({l}::text[]))")
                    }
                    Field::Text(_) => {
                        let b = bind(params, texts(&cond.values[..1]).pop().unwrap_or_default());
                        format!("({col} {sym} {b}::text)")
                    }
                    Field::Bool(_) => {
                        let vals: Vec<bool> = cond
                            .values
                            .iter()
                            .filter_map(|v| match v {
                                Scalar::Bool(b) => Some(*b),
                                _ => None,
                            })
                            .collect();
                        let l = bind(params, vals);
                        format!("({col} = ANY({l}::bool[]))")
                    }
                    _ if op == Op::In => {
                        let l = bind(
                            params,
                            cond.values.iter().filter_map(num).collect::<Vec<f64>>(),
                        );
                        format!("({col}::float8 = ANY({l}::float8[]))")
                    }
                    _ => {
                        let b = bind(params, num(&cond.values[0]).unwrap_or(f64::NAN));
                        format!("({col}::float8 {sym} {b}::float8)")
                    }
                }
            }
        }
    };
    let pos = format!("COALESCE({pos}, FALSE)");
    if cond.op.is_negative() {
        format!("(NOT {pos})")
    } else {
        pos
    }
}
