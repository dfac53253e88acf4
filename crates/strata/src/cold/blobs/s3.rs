//! A bucket of an S3-compatible object store (AWS S3, MinIO, Ceph, R2,
//! moto, ...), spoken to directly: path-style URLs
//! (`endpoint/bucket/key`), each request signed with AWS Signature
//! Version 4 over its headers and the SHA-256 of its body, over a
//! blocking HTTP client (`ureq`, already the LLM client's). The cold tier
//! needs eight operations, so a full SDK (and its async runtime) would
//! buy nothing here.
//!
//! A request that fails to connect, times out or gets a 5xx (or `429`,
//! or a copy's `200` carrying an error) is tried again three times, 0.1,
//! 0.4 and 1.6 s apart; then it is [`Error::Unavailable`] naming the
//! endpoint. Nothing the tier does treats that as success: a demotion
//! whose segment did not land deletes nothing from the store, and
//! upkeep tries again next time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::config::S3Config;
use crate::{Error, Result};

/// Waits before each retry.
const BACKOFF_MS: [u64; 3] = [100, 400, 1600];

/// Most keys one listing page asks for.
const PAGE: usize = 1000;

/// Credentials, read from the environment when the tier opens.
struct Creds {
    access: String,
    secret: String,
    token: Option<String>,
}

/// One bucket (and key prefix).
pub(crate) struct Bucket {
    agent: ureq::Agent,
    /// `scheme://host[:port]`, no trailing slash.
    endpoint: String,
    /// The `host` header as signed.
    host: String,
    bucket: String,
    /// Empty, or ending in `/`.
    prefix: String,
    /// `s3://bucket/prefix`.
    url: String,
    region: String,
    creds: Creds,
    /// Lengths from the last listing, for the index cache.
    listed: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// A reply: status, two headers the tier reads, body.
struct Reply {
    status: u16,
    content_range: Option<String>,
    content_length: Option<u64>,
    body: Vec<u8>,
}

impl Reply {
    /// The `<Code>` of an error body (empty when there is none).
    fn code(&self) -> String {
        tag(&String::from_utf8_lossy(&self.body), "Code").unwrap_or_default()
    }

    fn describe(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        match (tag(&text, "Code"), tag(&text, "Message")) {
            (Some(c), Some(m)) => format!("{} {c}: {m}", self.status),
            (Some(c), None) => format!("{} {c}", self.status),
            _ => format!("HTTP {}", self.status),
        }
    }
}

impl Bucket {
    /// A bucket handle for `cfg`, its credentials read from the
    /// environment variables it names. Sends nothing.
    pub(crate) fn new(cfg: &S3Config) -> Result<Bucket> {
        cfg.validate()?;
        let var = |name: &str, what: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "cold.s3: the {what} is read from the environment variable {name}, which is \
                     not set"
                ))
            })
        };
        let creds = Creds {
            access: var(&cfg.access_key_env, "access key id")?,
            secret: var(&cfg.secret_key_env, "secret access key")?,
            token: std::env::var(&cfg.session_token_env)
                .ok()
                .filter(|t| !t.is_empty()),
        };
        let endpoint = cfg.endpoint_url();
        let host = host_of(&endpoint);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(cfg.timeout_ms)))
            .http_status_as_error(false)
            .build()
            .into();
        let mut prefix = cfg.prefix.clone();
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        Ok(Bucket {
            agent,
            endpoint,
            host,
            bucket: cfg.bucket.clone(),
            prefix,
            url: cfg.url(),
            region: cfg.region.clone(),
            creds,
            listed: Mutex::new(HashMap::new()),
        })
    }

    /// How errors name an object (`""`: the bucket and prefix).
    fn named(&self, name: &str) -> String {
        if name.is_empty() {
            self.url.clone()
        } else {
            format!("{}/{name}", self.url)
        }
    }

    /// The object names (without the prefix) directly under the prefix;
    /// their lengths are kept for [`Bucket::listed_len`].
    pub(crate) fn list(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![
                ("delimiter", "/".to_string()),
                ("list-type", "2".to_string()),
                ("max-keys", PAGE.to_string()),
                ("prefix", self.prefix.clone()),
            ];
            if let Some(t) = &token {
                query.push(("continuation-token", t.clone()));
            }
            let r = self.send("GET", None, &query, &[], &[])?;
            if r.status != 200 {
                return Err(self.failed("listing", "", &r));
            }
            let text = String::from_utf8_lossy(&r.body);
            for c in blocks(&text, "Contents") {
                let (Some(key), Some(size)) = (tag(c, "Key"), tag(c, "Size")) else {
                    return Err(self.garbled("a listing entry without Key or Size"));
                };
                let size = size
                    .parse::<u64>()
                    .map_err(|_| self.garbled("a listing entry's Size is not a number"))?;
                if let Some(name) = key.strip_prefix(&self.prefix)
                    && !name.is_empty()
                    && !name.contains('/')
                {
                    out.push((name.to_string(), size));
                }
            }
            token = match tag(&text, "IsTruncated").as_deref() {
                Some("true") => Some(
                    tag(&text, "NextContinuationToken")
                        .ok_or_else(|| self.garbled("a truncated listing without its token"))?,
                ),
                _ => None,
            };
            if token.is_none() {
                break;
            }
        }
        let names = out.iter().map(|(n, _)| n.clone()).collect();
        *self.listed.lock().unwrap() = out.into_iter().collect();
        Ok(names)
    }

    /// An object's length as the last listing saw it (a `HEAD` when that
    /// did not list it).
    pub(crate) fn listed_len(&self, name: &str) -> Result<u64> {
        if let Some(n) = self.listed.lock().unwrap().get(name) {
            return Ok(*n);
        }
        self.len(name)
    }

    /// An object's bytes (`range`: from an offset, at most a length) and
    /// its whole length.
    pub(crate) fn get(&self, name: &str, range: Option<(u64, u64)>) -> Result<(Vec<u8>, u64)> {
        let mut headers = Vec::new();
        if let Some((from, len)) = range {
            if len == 0 {
                return Ok((Vec::new(), self.len(name)?));
            }
            headers.push(("range", format!("bytes={from}-{}", from + len - 1)));
        }
        let r = self.send("GET", Some(name), &[], &headers, &[])?;
        match r.status {
            200 => {
                let total = r.body.len() as u64;
                let body = match range {
                    // A server that ignores `Range` sends it all.
                    Some((from, len)) => {
                        let a = (from as usize).min(r.body.len());
                        let b = (from.saturating_add(len) as usize).min(r.body.len());
                        r.body[a..b].to_vec()
                    }
                    None => r.body,
                };
                Ok((body, total))
            }
            206 => {
                let total = r
                    .content_range
                    .as_deref()
                    .and_then(|c| c.rsplit('/').next())
                    .and_then(|t| t.trim().parse::<u64>().ok())
                    .ok_or_else(|| self.garbled("a partial reply without Content-Range"))?;
                Ok((r.body, total))
            }
            // The range starts at or after the end.
            416 => Ok((Vec::new(), self.len(name)?)),
            _ => Err(self.failed("reading", name, &r)),
        }
    }

    /// An object's length.
    pub(crate) fn len(&self, name: &str) -> Result<u64> {
        let r = self.send("HEAD", Some(name), &[], &[], &[])?;
        match r.status {
            200 => r
                .content_length
                .ok_or_else(|| self.garbled("a HEAD reply without Content-Length")),
            _ => Err(self.failed("reading", name, &r)),
        }
    }

    /// Puts an object (`only_new`: unless one of that name exists, then
    /// `false`).
    pub(crate) fn put(&self, name: &str, bytes: &[u8], only_new: bool) -> Result<bool> {
        let mut headers = vec![("content-type", "application/octet-stream".to_string())];
        if only_new {
            headers.push(("if-none-match", "*".to_string()));
        }
        let r = self.send("PUT", Some(name), &[], &headers, bytes)?;
        match r.status {
            200 => {
                self.listed
                    .lock()
                    .unwrap()
                    .insert(name.to_string(), bytes.len() as u64);
                Ok(true)
            }
            412 if only_new => Ok(false),
            // A conditional write racing another to the same name.
            409 if only_new && r.code() == "ConditionalRequestConflict" => Ok(false),
            _ => Err(self.failed("writing", name, &r)),
        }
    }

    /// Copies an object to another name in the bucket.
    pub(crate) fn copy(&self, from: &str, to: &str) -> Result<()> {
        let source = format!("/{}/{}", self.bucket, encode(&self.key(from), false));
        let r = self.send("PUT", Some(to), &[], &[("x-amz-copy-source", source)], &[])?;
        match r.status {
            200 => {
                let mut listed = self.listed.lock().unwrap();
                if let Some(n) = listed.get(from).copied() {
                    listed.insert(to.to_string(), n);
                }
                Ok(())
            }
            _ => Err(self.failed(&format!("copying {} to", self.named(from)), to, &r)),
        }
    }

    /// Deletes an object (none of that name is not an error).
    pub(crate) fn delete(&self, name: &str) -> Result<()> {
        let r = self.send("DELETE", Some(name), &[], &[], &[])?;
        match r.status {
            200 | 204 | 404 => {
                self.listed.lock().unwrap().remove(name);
                Ok(())
            }
            _ => Err(self.failed("removing", name, &r)),
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The error for a reply that is not what `doing` expected.
    fn failed(&self, doing: &str, name: &str, r: &Reply) -> Error {
        let what = self.named(name);
        let context = format!("{doing} {what}");
        let code = r.code();
        match (r.status, code.as_str()) {
            (404, "NoSuchBucket") => Error::InvalidConfig(format!(
                "cold.s3.bucket: `{}` does not exist at {}",
                self.bucket, self.endpoint
            )),
            (404, _) => Error::io(
                context,
                std::io::Error::new(std::io::ErrorKind::NotFound, r.describe()),
            ),
            (401 | 403, _) => Error::io(
                context,
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{} (check the credentials and the region, `{}`)",
                        r.describe(),
                        self.region
                    ),
                ),
            ),
            _ => Error::io(context, std::io::Error::other(r.describe())),
        }
    }

    fn garbled(&self, why: &str) -> Error {
        Error::io(
            format!("reading a reply of {}", self.endpoint),
            std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string()),
        )
    }

    /// Sends one signed request, trying again on what may pass.
    fn send(
        &self,
        method: &str,
        name: Option<&str>,
        query: &[(&str, String)],
        headers: &[(&str, String)],
        body: &[u8],
    ) -> Result<Reply> {
        let mut last = String::new();
        for attempt in 0..=BACKOFF_MS.len() {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(BACKOFF_MS[attempt - 1]));
            }
            match self.send_once(method, name, query, headers, body) {
                Ok(r) if r.status >= 500 || r.status == 429 => last = r.describe(),
                // A copy can fail after its `200` was sent.
                Ok(r)
                    if r.status == 200
                        && method == "PUT"
                        && headers.iter().any(|(h, _)| *h == "x-amz-copy-source")
                        && r.code() != "" =>
                {
                    last = r.describe()
                }
                Ok(r) => return Ok(r),
                Err(e) => last = e,
            }
        }
        let what = self.named(name.unwrap_or_default());
        Err(Error::Unavailable {
            backend: "s3",
            source: format!(
                "{method} {what} at {}: {last} ({} tries)",
                self.endpoint,
                BACKOFF_MS.len() + 1
            )
            .into(),
        })
    }

    fn send_once(
        &self,
        method: &str,
        name: Option<&str>,
        query: &[(&str, String)],
        extra: &[(&str, String)],
        body: &[u8],
    ) -> std::result::Result<Reply, String> {
        let path = match name {
            Some(n) => format!("/{}/{}", self.bucket, encode(&self.key(n), false)),
            None => format!("/{}", self.bucket),
        };
        let mut q: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (encode(k, true), encode(v, true)))
            .collect();
        q.sort();
        let query_string = q
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let now = jiff::Timestamp::now();
        let amz_date = now.strftime("%Y%m%dT%H%M%SZ").to_string();
        let payload = hex(&Sha256::digest(body));
        let mut headers: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        headers.push(("host".into(), self.host.clone()));
        headers.push(("x-amz-content-sha256".into(), payload.clone()));
        headers.push(("x-amz-date".into(), amz_date.clone()));
        if let Some(t) = &self.creds.token {
            headers.push(("x-amz-security-token".into(), t.clone()));
        }
        headers.sort();
        let auth = authorization(&Signing {
            method,
            path: &path,
            query: &query_string,
            headers: &headers,
            payload: &payload,
            amz_date: &amz_date,
            region: &self.region,
            access: &self.creds.access,
            secret: &self.creds.secret,
        });
        let mut url = format!("{}{path}", self.endpoint);
        if !query_string.is_empty() {
            url.push('?');
            url.push_str(&query_string);
        }
        let sent = match method {
            "GET" => with_headers(self.agent.get(&url), &headers, &auth).call(),
            "HEAD" => with_headers(self.agent.head(&url), &headers, &auth).call(),
            "DELETE" => with_headers(self.agent.delete(&url), &headers, &auth).call(),
            "PUT" => with_headers(self.agent.put(&url), &headers, &auth).send(body),
            _ => return Err(format!("no such method {method}")),
        };
        let mut resp = sent.map_err(|e| e.to_string())?;
        let header = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_range = header("content-range");
        let content_length = header("content-length").and_then(|v| v.parse().ok());
        let status = resp.status().as_u16();
        let body = if method == "HEAD" {
            Vec::new()
        } else {
            resp.body_mut()
                .with_config()
                .limit(u64::MAX)
                .read_to_vec()
                .map_err(|e| format!("reading the reply: {e}"))?
        };
        Ok(Reply {
            status,
            content_range,
            content_length,
            body,
        })
    }
}

/// A request with the signed headers (the client sets `host` itself) and
/// the signature.
fn with_headers<B>(
    mut b: ureq::RequestBuilder<B>,
    headers: &[(String, String)],
    auth: &str,
) -> ureq::RequestBuilder<B> {
    for (k, v) in headers.iter().filter(|(k, _)| k != "host") {
        b = b.header(k, v);
    }
    b.header("authorization", auth)
}

/// What a signature covers.
struct Signing<'a> {
    method: &'a str,
    /// The URI path, encoded.
    path: &'a str,
    /// The canonical query string.
    query: &'a str,
    /// Lower-case names, sorted; values as sent.
    headers: &'a [(String, String)],
    /// Hex SHA-256 of the body.
    payload: &'a str,
    /// `YYYYMMDDTHHMMSSZ`.
    amz_date: &'a str,
    region: &'a str,
    access: &'a str,
    secret: &'a str,
}

/// The `authorization` header of AWS Signature Version 4 for service
/// `s3`.
fn authorization(s: &Signing) -> String {
    let mut canonical_headers = String::new();
    for (k, v) in s.headers {
        canonical_headers.push_str(&format!("{k}:{}\n", v.trim()));
    }
    let signed = s
        .headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed}\n{}",
        s.method, s.path, s.query, s.payload
    );
    let date = &s.amz_date[..8];
    let scope = format!("{date}/{}/s3/aws4_request", s.region);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        s.amz_date,
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{}", s.secret).as_bytes(), date.as_bytes());
    for part in [s.region, "s3", "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let signature = hex(&hmac(&key, to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        s.access
    )
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// URI-encodes `s` as SigV4 asks: every byte but `A-Z a-z 0-9 - _ . ~`
/// (and `/`, unless `slash`) as `%XX`.
fn encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if !slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The host (and port, unless the scheme's default) of an endpoint URL.
fn host_of(endpoint: &str) -> String {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("https", endpoint));
    let host = rest.split('/').next().unwrap_or(rest);
    match (scheme, host.rsplit_once(':')) {
        ("http", Some((h, "80"))) | ("https", Some((h, "443"))) => h.to_string(),
        _ => host.to_string(),
    }
}

/// The text of the first `<name>…</name>` in `xml`, unescaped.
fn tag(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let a = xml.find(&open)? + open.len();
    let b = a + xml[a..].find(&close)?;
    Some(unescape(&xml[a..b]))
}

/// The insides of every `<name>…</name>` in `xml`.
fn blocks<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(a) = rest.find(&open) {
        let inner = &rest[a + open.len()..];
        let Some(b) = inner.find(&close) else {
            break;
        };
        out.push(&inner[..b]);
        rest = &inner[b + close.len()..];
    }
    out
}

/// XML text with its entities (named and numeric) replaced.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let Some(end) = after.find(';') else {
            out.push_str(after);
            return out;
        };
        let entity = &after[1..end];
        let c = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e => e
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| e.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => out.push(c),
            None => out.push_str(&after[..=end]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of AWS's documentation for signing a `GET` of an
    /// object with a `Range` header ("Signature Calculations for the
    /// Authorization Header: Transferring Payload in a Single Chunk").
    #[test]
    fn signs_as_the_aws_documentation_example() {
        let empty = hex(&Sha256::digest(b""));
        assert_eq!(
            empty,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let headers = vec![
            (
                "host".to_string(),
                "examplebucket.s3.amazonaws.com".to_string(),
            ),
            ("range".to_string(), "bytes=0-9".to_string()),
            ("x-amz-content-sha256".to_string(), empty.clone()),
            ("x-amz-date".to_string(), "20130524T000000Z".to_string()),
        ];
        let auth = authorization(&Signing {
            method: "GET",
            path: "/test.txt",
            query: "",
            headers: &headers,
            payload: &empty,
            amz_date: "20130524T000000Z",
            region: "us-east-1",
            access: "AKIAIOSFODNN7EXAMPLE",
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        });
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn encodes_keys_and_queries() {
        assert_eq!(encode("a b/c~d", false), "a%20b/c~d");
        assert_eq!(encode("a b/c", true), "a%20b%2Fc");
        assert_eq!(encode("ü", true), "%C3%BC");
    }

    #[test]
    fn hosts_keep_ports_but_default_ones() {
        assert_eq!(host_of("http://127.0.0.1:9000"), "127.0.0.1:9000");
        assert_eq!(
            host_of("https://s3.eu-west-1.amazonaws.com"),
            "s3.eu-west-1.amazonaws.com"
        );
        assert_eq!(host_of("https://minio.lan:443"), "minio.lan");
        assert_eq!(host_of("http://minio.lan:80/"), "minio.lan");
    }

    #[test]
    fn reads_listings() {
        let xml = "<ListBucketResult><IsTruncated>true</IsTruncated>\
            <Contents><Key>p/seg-1.cold</Key><Size>12</Size></Contents>\
            <Contents><Key>p/a&amp;b</Key><Size>3</Size></Contents>\
            <NextContinuationToken>t&#x2F;1</NextContinuationToken></ListBucketResult>";
        let keys: Vec<_> = blocks(xml, "Contents")
            .into_iter()
            .map(|c| (tag(c, "Key").unwrap(), tag(c, "Size").unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                ("p/seg-1.cold".to_string(), "12".to_string()),
                ("p/a&b".to_string(), "3".to_string())
            ]
        );
        assert_eq!(tag(xml, "NextContinuationToken").unwrap(), "t/1");
        assert_eq!(tag(xml, "IsTruncated").unwrap(), "true");
        assert_eq!(unescape("&bogus; &#99999999; x"), "&bogus; &#99999999; x");
    }
}
