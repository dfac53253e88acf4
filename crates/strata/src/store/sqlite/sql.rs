//! The SQL a query becomes: view, expiry and filter, order, limit.

use super::*;

/// SQL selecting the rows a view may see, with its parameters.
pub(super) fn view_sql(view: Option<&View>, alias: &str, params: &mut Vec<SqlValue>) -> String {
    let Some(view) = view else { return "1".into() };
    if view.is_empty() {
        return "0".into();
    }
    let parts: Vec<String> = view
        .entries()
        .iter()
        .map(|e| {
            params.push(SqlValue::Text(e.scope.to_string()));
            if e.subtree {
                let (lo, hi) = e.range();
                params.push(SqlValue::Text(lo));
                params.push(SqlValue::Text(hi));
                format!("{alias}scope = ? OR ({alias}scope > ? AND {alias}scope < ?)")
            } else {
                format!("{alias}scope = ?")
            }
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// The WHERE clause of a query over `memories` or `archive` aliased `m.`.
pub(super) fn where_sql(q: &Query, archived: bool, params: &mut Vec<SqlValue>) -> String {
    let mut clauses = vec![view_sql(q.view.as_ref(), "m.", params)];
    if !q.include_expired && !archived {
        params.push(SqlValue::Integer(q.now.as_millisecond()));
        clauses.push("(m.expires_at IS NULL OR m.expires_at > ?)".into());
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

pub(super) fn limit_sql(q: &Query, params: &mut Vec<SqlValue>) -> String {
    params.push(SqlValue::Integer(
        q.limit.map_or(-1, |l| l.min(i64::MAX as usize) as i64),
    ));
    params.push(SqlValue::Integer(q.offset as i64));
    "LIMIT ? OFFSET ?".into()
}
