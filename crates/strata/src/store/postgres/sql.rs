//! The SQL a query becomes: view, expiry and filter, order, limit. Every
//! value is a bound parameter (`$n`, numbered by the list it is pushed on).

use super::*;

/// Pushes `v` and returns its placeholder.
pub(super) fn bind(params: &mut Vec<P>, v: impl ToSql + Sync + Send + 'static) -> String {
    params.push(Box::new(v));
    format!("${}", params.len())
}

/// SQL selecting the rows a view may see over the column `col` (a scope).
pub(super) fn view_sql(view: Option<&View>, col: &str, params: &mut Vec<P>) -> String {
    let Some(view) = view else {
        return "TRUE".into();
    };
    if view.is_empty() {
        return "FALSE".into();
    }
    let parts: Vec<String> = view
        .entries()
        .iter()
        .map(|e| {
            let s = bind(params, e.scope.to_string());
            if e.subtree {
                let (lo, hi) = e.range();
                let lo = bind(params, lo);
                let hi = bind(params, hi);
                format!("{col} = {s}::text OR ({col} > {lo}::text AND {col} < {hi}::text)")
            } else {
                format!("{col} = {s}::text")
            }
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// The WHERE clause of a query over `memories` or `archive` aliased `m`.
pub(super) fn where_sql(q: &Query, archived: bool, params: &mut Vec<P>) -> String {
    let mut clauses = vec![view_sql(q.view.as_ref(), "m.scope", params)];
    if !q.include_expired && !archived {
        let now = bind(params, q.now.as_millisecond());
        clauses.push(format!(
            "(m.expires_at IS NULL OR m.expires_at > {now}::int8)"
        ));
    }
    if !q.filter.is_trivial() {
        clauses.push(filter_sql::filter_sql(&q.filter, "m.", params));
    }
    clauses.join(" AND ")
}

pub(super) fn order_sql(o: Order) -> &'static str {
    match o {
        Order::Newest => "ORDER BY m.created_at DESC, m.id DESC",
        Order::Oldest => "ORDER BY m.created_at ASC, m.id ASC",
    }
}

pub(super) fn limit_sql(q: &Query, params: &mut Vec<P>) -> String {
    let lim = match q.limit {
        Some(l) => format!(
            "LIMIT {}::int8",
            bind(params, l.min(i64::MAX as usize) as i64)
        ),
        None => String::new(),
    };
    let off = bind(params, q.offset.min(i64::MAX as usize) as i64);
    format!("{lim} OFFSET {off}::int8")
}
