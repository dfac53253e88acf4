//! The inspector's HTML: an escaping wrapper for every value written into a
//! page, and the page frame (head, navigation, sign-out form).
//!
//! Pages are plain strings built with `write!`. Markup comes only from
//! string literals in this module and `pages.rs`; anything else (memory
//! text, scopes, ids, error messages, what a request sent) goes through
//! [`esc`], which escapes it for both element text and quoted attribute
//! values. Memory text is untrusted: an agent can store `<script>`.

use std::fmt::{self, Display, Write as _};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Session;

/// A value to write into HTML: `& < > " '` become entities.
pub struct Esc<'a>(pub &'a str);

/// Escapes `s` for element text and quoted attribute values.
pub fn esc(s: &str) -> Esc<'_> {
    Esc(s)
}

impl Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// A value for a URL's query or path segment: percent-encoded (and then
/// still escaped where it lands in an attribute).
pub fn url(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The navigation's pages: path and label.
const NAV: [(&str, &str); 7] = [
    ("/ui", "Scopes"),
    ("/ui/search", "Search"),
    ("/ui/context", "Context"),
    ("/ui/sessions", "Sessions"),
    ("/ui/learned", "Learned"),
    ("/ui/export", "Export"),
    ("/ui/import", "Import"),
];

/// A whole page: `body` (already escaped markup) inside the frame, with
/// the navigation and the signed-in token when there is a session.
pub fn page(status: StatusCode, title: &str, sess: Option<&Session>, body: &str) -> Response {
    let mut h = String::with_capacity(body.len() + 1024);
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · strata</title><link rel=\"stylesheet\" href=\"/ui/assets/ui.css\">\
         <script src=\"/ui/assets/ui.js\" defer></script></head><body><header>\
         <a class=\"brand\" href=\"/ui\">strata</a>",
        esc(title)
    );
    if let Some(s) = sess {
        h.push_str("<nav>");
        for (href, label) in NAV {
            let _ = write!(h, "<a href=\"{href}\">{label}</a>");
        }
        let who = match s.grant.name.as_deref() {
            None => "local user",
            Some(n) if n.starts_with("local:") => "local user",
            Some(n) => n,
        };
        let access = if s.grant.can_write() {
            "read-write"
        } else {
            "read-only"
        };
        let _ = write!(
            h,
            "</nav><form class=\"whoami\" method=\"post\" action=\"/ui/logout\">{}\
             <span id=\"who\">{} ({access})</span> <button>Sign out</button></form>",
            csrf_field(s),
            esc(who)
        );
    }
    let _ = write!(
        h,
        "</header><main><h1>{}</h1>{body}</main></body></html>",
        esc(title)
    );
    html(status, h)
}

/// An HTML answer.
pub fn html(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

/// The hidden field every state-changing form carries.
pub fn csrf_field(s: &Session) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(&s.csrf)
    )
}

/// A `<pre>` of pretty-printed JSON, escaped.
pub fn json_block(v: &serde_json::Value) -> String {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    format!("<pre class=\"json\">{}</pre>", esc(&text))
}

/// A notice above a page's content: `kind` is `ok`, `error` or `conflict`.
pub fn notice(kind: &str, text: &str) -> String {
    format!(
        "<p class=\"notice {kind}\" role=\"status\">{}</p>",
        esc(text)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_markup_character_is_escaped() {
        let s = esc("<img src=x onerror=alert(1)> & \"q\" 'a'").to_string();
        assert_eq!(
            s,
            "&lt;img src=x onerror=alert(1)&gt; &amp; &quot;q&quot; &#39;a&#39;"
        );
        assert_eq!(esc("plain é").to_string(), "plain é");
        assert_eq!(esc("").to_string(), "");
    }

    #[test]
    fn urls_are_percent_encoded() {
        assert_eq!(url("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
    }
}
