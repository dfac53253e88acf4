//! Filters: the seeds' JSON form, parsed into a typed tree, evaluated in
//! memory and compiled to SQL with bound parameters.
//!
//! ```json
//! {"kind": "decision", "tags": ["bug_fix"], "importance": {"$gte": 0.7}}
//! ```
//!
//! Operators `$eq $ne $gt $gte $lt $lte $in $nin`, `$all` on tags, `$and` and
//! `$or`; a field given a plain value means `$eq`, a list means `$in` (for
//! tags: any-of). Fields are every scalar of [`Memory`](crate::Memory), `tags`,
//! and `payload.<path>`. Unknown fields and operators are errors that name
//! them.
//!
//! Semantics shared by both evaluators (the conformance suite checks they
//! agree): a condition on a missing value (no role, no payload key, a payload
//! value of another JSON type) is false for `$eq $gt $gte $lt $lte $in $all`
//! and true for `$ne $nin`. Compiled SQL wraps every positive condition in
//! `COALESCE(…, 0)` so SQL's three-valued logic never leaks into `NOT`.

use std::cmp::Ordering;

use jiff::Timestamp;
use serde_json::Value;

use crate::error::Error;
use crate::model::{Memory, Role, Source, parse_time};

/// A parsed filter.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// Every sub-filter holds (an empty list always holds).
    And(Vec<Filter>),
    /// At least one sub-filter holds.
    Or(Vec<Filter>),
    /// One condition on one field.
    Cond(Cond),
}

/// A condition on one field.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    /// The field.
    pub field: Field,
    /// The operator.
    pub op: Op,
    /// One value, or several for `$in $nin $all`.
    pub values: Vec<Scalar>,
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `$eq`
    Eq,
    /// `$ne`
    Ne,
    /// `$gt`
    Gt,
    /// `$gte`
    Gte,
    /// `$lt`
    Lt,
    /// `$lte`
    Lte,
    /// `$in`
    In,
    /// `$nin`
    Nin,
    /// `$all` (tags only)
    All,
}

impl Op {
    fn parse(s: &str, field: &str) -> Result<Op, Error> {
        Ok(match s {
            "$eq" => Op::Eq,
            "$ne" => Op::Ne,
            "$gt" => Op::Gt,
            "$gte" => Op::Gte,
            "$lt" => Op::Lt,
            "$lte" => Op::Lte,
            "$in" => Op::In,
            "$nin" => Op::Nin,
            "$all" => Op::All,
            _ => {
                return Err(Error::InvalidFilter(format!(
                    "unknown operator `{s}` on `{field}`; operators are $eq $ne $gt $gte $lt $lte $in $nin $all"
                )));
            }
        })
    }

    pub(crate) fn is_negative(self) -> bool {
        matches!(self, Op::Ne | Op::Nin)
    }
}

/// A filterable field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// A text column.
    Text(&'static str),
    /// A numeric column.
    Num(&'static str),
    /// A time column (stored as milliseconds).
    Time(&'static str),
    /// A boolean column.
    Bool(&'static str),
    /// The tag list.
    Tags,
    /// A path into the payload object.
    Payload(Vec<String>),
}

const TEXT_FIELDS: [&str; 8] = [
    "id", "scope", "kind", "role", "key", "source", "session", "checksum",
];
const NUM_FIELDS: [&str; 4] = ["importance", "access_count", "tokens", "version"];
const TIME_FIELDS: [&str; 4] = ["created_at", "updated_at", "last_accessed_at", "expires_at"];
const BOOL_FIELDS: [&str; 2] = ["pinned", "sensitive"];

impl Field {
    fn parse(name: &str) -> Result<Field, Error> {
        if let Some(f) = TEXT_FIELDS.iter().find(|f| **f == name) {
            return Ok(Field::Text(f));
        }
        if name == "content" {
            return Ok(Field::Text("content"));
        }
        if let Some(f) = NUM_FIELDS.iter().find(|f| **f == name) {
            return Ok(Field::Num(f));
        }
        if let Some(f) = TIME_FIELDS.iter().find(|f| **f == name) {
            return Ok(Field::Time(f));
        }
        if let Some(f) = BOOL_FIELDS.iter().find(|f| **f == name) {
            return Ok(Field::Bool(f));
        }
        if name == "tags" {
            return Ok(Field::Tags);
        }
        if let Some(path) = name.strip_prefix("payload.") {
            let segs: Vec<String> = path.split('.').map(str::to_string).collect();
            for s in &segs {
                if s.is_empty()
                    || !s
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    return Err(Error::InvalidFilter(format!(
                        "field `{name}`: payload path segments are [A-Za-z0-9_-]+ joined by `.`"
                    )));
                }
            }
            return Ok(Field::Payload(segs));
        }
        Err(Error::InvalidFilter(format!(
            "unknown field `{name}`; fields are {}, content, {}, {}, {}, tags, payload.<path>",
            TEXT_FIELDS.join(", "),
            NUM_FIELDS.join(", "),
            TIME_FIELDS.join(", "),
            BOOL_FIELDS.join(", ")
        )))
    }

    /// The field's name as written in a filter.
    pub fn name(&self) -> String {
        match self {
            Field::Text(n) | Field::Num(n) | Field::Time(n) | Field::Bool(n) => n.to_string(),
            Field::Tags => "tags".into(),
            Field::Payload(p) => format!("payload.{}", p.join(".")),
        }
    }
}

/// A typed filter value.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    /// Text.
    Text(String),
    /// An integer.
    Int(i64),
    /// A real number.
    Real(f64),
    /// A boolean.
    Bool(bool),
    /// JSON null (only in `$eq`/`$ne`): "missing".
    Null,
}

impl Scalar {
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::Int(i) => Some(*i as f64),
            Scalar::Real(r) => Some(*r),
            _ => None,
        }
    }
}

impl Filter {
    /// A filter that matches everything.
    pub fn all() -> Filter {
        Filter::And(Vec::new())
    }

    /// Whether this filter matches everything trivially.
    pub fn is_trivial(&self) -> bool {
        matches!(self, Filter::And(v) if v.is_empty())
    }

    /// Parses filter JSON text.
    pub fn parse_str(text: &str) -> Result<Filter, Error> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::InvalidFilter(format!("not valid JSON: {e}")))?;
        Filter::parse(&v)
    }

    /// Most conditions in one filter.
    pub const MAX_CONDITIONS: usize = 256;
    /// Most values in one filter, over all its `$in`, `$nin` and `$all`
    /// lists. With [`Filter::MAX_CONDITIONS`] and [`Filter::MAX_DEPTH`],
    /// keeps a filter well inside what a store compiles (SQLite: 32,766
    /// bound values, expressions 1,000 deep).
    pub const MAX_VALUES: usize = 4096;
    /// Deepest nesting of `$and` and `$or`.
    pub const MAX_DEPTH: usize = 32;

    /// Parses a filter from JSON.
    pub fn parse(v: &Value) -> Result<Filter, Error> {
        let f = Filter::parse_at(v, 0)?;
        let (mut conds, mut values) = (0, 0);
        f.visit(&mut |c| {
            conds += 1;
            values += c.values.len();
        });
        if conds > Filter::MAX_CONDITIONS {
            return Err(Error::InvalidFilter(format!(
                "{conds} conditions, over the limit of {}",
                Filter::MAX_CONDITIONS
            )));
        }
        if values > Filter::MAX_VALUES {
            return Err(Error::InvalidFilter(format!(
                "{values} values in `$in`, `$nin` and `$all` lists, over the limit of {}",
                Filter::MAX_VALUES
            )));
        }
        Ok(f)
    }

    fn visit(&self, f: &mut dyn FnMut(&Cond)) {
        match self {
            Filter::And(v) | Filter::Or(v) => v.iter().for_each(|x| x.visit(f)),
            Filter::Cond(c) => f(c),
        }
    }

    fn parse_at(v: &Value, depth: usize) -> Result<Filter, Error> {
        if depth > Filter::MAX_DEPTH {
            return Err(Error::InvalidFilter(format!(
                "`$and` and `$or` nested deeper than {}",
                Filter::MAX_DEPTH
            )));
        }
        let obj = v.as_object().ok_or_else(|| {
            Error::InvalidFilter(format!("expected a JSON object, got {}", type_name(v)))
        })?;
        let mut parts = Vec::new();
        for (k, val) in obj {
            match k.as_str() {
                "$and" | "$or" => {
                    let arr = val.as_array().ok_or_else(|| {
                        Error::InvalidFilter(format!("`{k}` expects a list of filters"))
                    })?;
                    if k == "$or" && arr.is_empty() {
                        return Err(Error::InvalidFilter(
                            "`$or` needs at least one filter".into(),
                        ));
                    }
                    let subs = arr
                        .iter()
                        .map(|x| Filter::parse_at(x, depth + 1))
                        .collect::<Result<Vec<_>, _>>()?;
                    parts.push(if k == "$and" {
                        Filter::And(subs)
                    } else {
                        Filter::Or(subs)
                    });
                }
                _ if k.starts_with('$') => {
                    return Err(Error::InvalidFilter(format!(
                        "unknown operator `{k}` at the top level; use `$and`, `$or` or a field name"
                    )));
                }
                _ => parts.extend(parse_field(k, val)?),
            }
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap()
        } else {
            Filter::And(parts)
        })
    }

    /// Evaluates the filter against a memory.
    pub fn matches(&self, m: &Memory) -> bool {
        match self {
            Filter::And(v) => v.iter().all(|f| f.matches(m)),
            Filter::Or(v) => v.iter().any(|f| f.matches(m)),
            Filter::Cond(c) => c.matches(m),
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn parse_field(name: &str, val: &Value) -> Result<Vec<Filter>, Error> {
    let field = Field::parse(name)?;
    let mut out = Vec::new();
    match val {
        Value::Object(ops) => {
            if ops.is_empty() {
                return Err(Error::InvalidFilter(format!(
                    "`{name}`: empty operator object"
                )));
            }
            for (op, arg) in ops {
                if !op.starts_with('$') {
                    return Err(Error::InvalidFilter(format!(
                        "`{name}`: expected operators such as `$eq`, found key `{op}`"
                    )));
                }
                let op = Op::parse(op, name)?;
                out.push(Filter::Cond(make_cond(&field, op, arg)?));
            }
        }
        Value::Array(_) => out.push(Filter::Cond(make_cond(&field, Op::In, val)?)),
        _ => out.push(Filter::Cond(make_cond(&field, Op::Eq, val)?)),
    }
    Ok(out)
}

fn make_cond(field: &Field, op: Op, arg: &Value) -> Result<Cond, Error> {
    let name = field.name();
    let op_name = match op {
        Op::Eq => "$eq",
        Op::Ne => "$ne",
        Op::Gt => "$gt",
        Op::Gte => "$gte",
        Op::Lt => "$lt",
        Op::Lte => "$lte",
        Op::In => "$in",
        Op::Nin => "$nin",
        Op::All => "$all",
    };
    let multi = matches!(op, Op::In | Op::Nin | Op::All);
    if op == Op::All && *field != Field::Tags {
        return Err(Error::InvalidFilter(format!(
            "operator `$all` on `{name}`: only `tags` takes `$all`"
        )));
    }
    let raw: Vec<&Value> = if multi {
        arg.as_array()
            .ok_or_else(|| {
                Error::InvalidFilter(format!(
                    "`{op_name}` on `{name}` expects a list, got {}",
                    type_name(arg)
                ))
            })?
            .iter()
            .collect()
    } else {
        vec![arg]
    };
    // Checked before the values are: a list this long is refused whatever
    // it holds.
    if raw.len() > Filter::MAX_VALUES {
        return Err(Error::InvalidFilter(format!(
            "`{op_name}` on `{name}`: {} values, over the limit of {} values per filter",
            raw.len(),
            Filter::MAX_VALUES
        )));
    }
    let ordering = matches!(op, Op::Gt | Op::Gte | Op::Lt | Op::Lte);
    let mut values = Vec::with_capacity(raw.len());
    for v in raw {
        let expect = |what: &str| {
            Error::InvalidFilter(format!(
                "`{op_name}` on `{name}` expects {what}, got {}",
                type_name(v)
            ))
        };
        if v.is_null() {
            if multi || ordering {
                return Err(expect("a non-null value"));
            }
            if *field == Field::Tags {
                return Err(expect("a tag"));
            }
            values.push(Scalar::Null);
            continue;
        }
        let s = match field {
            Field::Text(f) => {
                let s = v.as_str().ok_or_else(|| expect("a string"))?;
                match *f {
                    "role" => drop(s.parse::<Role>()?),
                    "source" => drop(s.parse::<Source>()?),
                    _ => {}
                }
                Scalar::Text(s.to_string())
            }
            Field::Num(_) => match v.as_i64() {
                Some(i) => Scalar::Int(i),
                None => Scalar::Real(v.as_f64().ok_or_else(|| expect("a number"))?),
            },
            Field::Time(_) => match v {
                Value::String(s) => Scalar::Int(parse_time(&name, s)?.as_millisecond()),
                Value::Number(n) => Scalar::Int(
                    n.as_i64()
                        .ok_or_else(|| expect("milliseconds since 1970 or a time"))?,
                ),
                _ => return Err(expect("a time (RFC 3339, a date, or milliseconds)")),
            },
            Field::Bool(_) => {
                if ordering {
                    return Err(Error::InvalidFilter(format!(
                        "operator `{op_name}` on `{name}`: booleans take $eq/$ne"
                    )));
                }
                Scalar::Bool(v.as_bool().ok_or_else(|| expect("true or false"))?)
            }
            Field::Tags => {
                if ordering {
                    return Err(Error::InvalidFilter(format!(
                        "operator `{op_name}` on `tags`: tags take $eq $ne $in $nin $all"
                    )));
                }
                Scalar::Text(
                    v.as_str()
                        .ok_or_else(|| expect("a tag string"))?
                        .to_string(),
                )
            }
            Field::Payload(_) => match v {
                Value::String(s) => Scalar::Text(s.clone()),
                Value::Bool(b) => {
                    if ordering {
                        return Err(Error::InvalidFilter(format!(
                            "operator `{op_name}` on `{name}`: booleans take $eq/$ne"
                        )));
                    }
                    Scalar::Bool(*b)
                }
                Value::Number(n) => match n.as_i64() {
                    Some(i) => Scalar::Int(i),
                    None => Scalar::Real(n.as_f64().ok_or_else(|| expect("a finite number"))?),
                },
                _ => return Err(expect("a string, number or boolean")),
            },
        };
        values.push(s);
    }
    Ok(Cond {
        field: field.clone(),
        op,
        values,
    })
}

/// A value read from a memory for comparison.
enum Got<'a> {
    Missing,
    Text(&'a str),
    Num(f64),
    Bool(bool),
}

fn cmp_scalar(got: &Got<'_>, want: &Scalar) -> Option<Ordering> {
    match (got, want) {
        (Got::Text(a), Scalar::Text(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (Got::Num(a), w) => w.as_f64().and_then(|b| a.partial_cmp(&b)),
        (Got::Bool(a), Scalar::Bool(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

pub(crate) fn positive(op: Op) -> Op {
    match op {
        Op::Ne => Op::Eq,
        Op::Nin => Op::In,
        o => o,
    }
}

impl Cond {
    fn matches(&self, m: &Memory) -> bool {
        let pos = self.matches_positive(m);
        if self.op.is_negative() { !pos } else { pos }
    }

    fn matches_positive(&self, m: &Memory) -> bool {
        let op = positive(self.op);
        if let Field::Tags = self.field {
            let has = |s: &Scalar| matches!(s, Scalar::Text(t) if m.tags.iter().any(|x| x == t));
            return match op {
                Op::All => self.values.iter().all(has),
                _ => self.values.iter().any(has),
            };
        }
        let payload_value;
        let got = match &self.field {
            Field::Text(f) => {
                let v: Option<&str> = match *f {
                    "id" => Some(&m.id),
                    "scope" => Some(m.scope.as_str()),
                    "kind" => Some(m.kind.as_str()),
                    "role" => m.role.map(|r| r.as_str()),
                    "key" => m.key.as_deref(),
                    "source" => Some(m.source.as_str()),
                    "session" => m.session.as_deref(),
                    "checksum" => Some(&m.checksum),
                    "content" => Some(&m.content),
                    _ => None,
                };
                v.map_or(Got::Missing, Got::Text)
            }
            Field::Num(f) => Got::Num(match *f {
                "importance" => m.importance,
                "access_count" => m.access_count as f64,
                "tokens" => m.tokens as f64,
                _ => m.version as f64,
            }),
            Field::Time(f) => {
                let t: Option<Timestamp> = match *f {
                    "created_at" => Some(m.created_at),
                    "updated_at" => Some(m.updated_at),
                    "last_accessed_at" => m.last_accessed_at,
                    _ => m.expires_at,
                };
                t.map_or(Got::Missing, |t| Got::Num(t.as_millisecond() as f64))
            }
            Field::Bool(f) => Got::Bool(if *f == "pinned" {
                m.pinned
            } else {
                m.sensitive
            }),
            Field::Payload(path) => {
                payload_value = m.payload.as_ref().and_then(|p| walk(p, path));
                match payload_value {
                    None | Some(Value::Null) => Got::Missing,
                    Some(Value::String(s)) => Got::Text(s),
                    Some(Value::Number(n)) => n.as_f64().map_or(Got::Missing, Got::Num),
                    Some(Value::Bool(b)) => Got::Bool(*b),
                    Some(_) => return false,
                }
            }
            Field::Tags => unreachable!(),
        };
        if self.values.first() == Some(&Scalar::Null) {
            return matches!(got, Got::Missing);
        }
        let c = |w: &Scalar| cmp_scalar(&got, w);
        match op {
            Op::Eq | Op::In | Op::All => self.values.iter().any(|w| c(w) == Some(Ordering::Equal)),
            Op::Gt => c(&self.values[0]) == Some(Ordering::Greater),
            Op::Gte => matches!(
                c(&self.values[0]),
                Some(Ordering::Greater | Ordering::Equal)
            ),
            Op::Lt => c(&self.values[0]) == Some(Ordering::Less),
            Op::Lte => matches!(c(&self.values[0]), Some(Ordering::Less | Ordering::Equal)),
            Op::Ne | Op::Nin => unreachable!(),
        }
    }
}

fn walk<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path {
        cur = match cur {
            // An all-digit segment is an array index, as in the SQL path
            // (`$.a[0]`), never an object key.
            Value::Array(a) if seg.chars().all(|c| c.is_ascii_digit()) => {
                a.get(seg.parse::<usize>().ok()?)?
            }
            Value::Object(m) if !seg.chars().all(|c| c.is_ascii_digit()) => m.get(seg)?,
            _ => return None,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_and_operator_are_named() {
        let e = Filter::parse_str(r#"{"imporance": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `imporance`"), "{e}");
        let e = Filter::parse_str(r#"{"importance": {"$gte2": 0.5}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown operator `$gte2` on `importance`"),
            "{e}"
        );
        let e = Filter::parse_str(r#"{"$xor": []}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`$xor`"), "{e}");
        let e = Filter::parse_str(r#"{"importance": "high"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expects a number"), "{e}");
        let e = Filter::parse_str(r#"{"role": "robot"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("robot"), "{e}");
        let e = Filter::parse_str(r#"[1]"#).unwrap_err().to_string();
        assert!(e.contains("expected a JSON object"), "{e}");
        let e = Filter::parse_str(r#"{"kind": {"$all": ["a"]}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("only `tags`"), "{e}");
        let e = Filter::parse_str(r#"{"payload.a b": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("payload path"), "{e}");
        assert!(Filter::parse_str("{").is_err());
    }

    #[test]
    fn seed_form_parses() {
        let f = Filter::parse_str(
            r#"{"kind": "decision", "tags": ["bug_fix"], "importance": {"$gte": 0.7}}"#,
        )
        .unwrap();
        match f {
            Filter::And(v) => assert_eq!(v.len(), 3),
            other => panic!("{other:?}"),
        }
        assert!(Filter::parse_str("{}").unwrap().is_trivial());
    }

    #[test]
    fn a_list_over_the_limit_names_its_field_and_the_limit() {
        let many: Vec<usize> = (0..100_000).collect();
        let e = Filter::parse(&serde_json::json!({"kind": {"$in": many}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`$in` on `kind`: 100000 values"), "{e}");
        assert!(e.contains(&Filter::MAX_VALUES.to_string()), "{e}");
        // Lists each within the limit, together over it: the total is named.
        let half: Vec<String> = (0..Filter::MAX_VALUES / 2 + 1)
            .map(|i| i.to_string())
            .collect();
        let e = Filter::parse(&serde_json::json!({"kind": {"$in": half}, "tags": half}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("values in `$in`, `$nin` and `$all` lists"),
            "{e}"
        );
    }
}
