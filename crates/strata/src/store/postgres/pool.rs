//! Pooled connections, each with its prepared statements, and the one
//! query interface over a connection or a transaction.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};

use postgres::{GenericClient, Statement};

use super::*;

/// A connection and the statements prepared on it.
pub(super) struct Conn {
    pub(super) client: Client,
    stmts: HashMap<String, Statement>,
    /// When it went back to the pool.
    idle_since: std::time::Instant,
    /// Set when a call on it failed as the server being gone: it is closed
    /// rather than pooled.
    broken: bool,
}

impl Conn {
    pub(super) fn new(client: Client) -> Conn {
        Conn {
            client,
            stmts: HashMap::new(),
            idle_since: std::time::Instant::now(),
            broken: false,
        }
    }

    /// The connection outside a transaction.
    pub(super) fn cx(&mut self) -> Cx<'_, Client> {
        Cx {
            c: &mut self.client,
            stmts: &mut self.stmts,
            broken: &mut self.broken,
        }
    }

    /// Runs `f` in a transaction; commits when it returns `Ok`.
    pub(super) fn tx<T>(
        &mut self,
        f: impl FnOnce(&mut Cx<'_, postgres::Transaction<'_>>) -> Result<T>,
    ) -> Result<T> {
        let broken = &mut self.broken;
        let mut tx = self.client.transaction().map_err(|e| note(broken, e))?;
        let out = f(&mut Cx {
            c: &mut tx,
            stmts: &mut self.stmts,
            broken,
        })?;
        tx.commit().map_err(|e| note(broken, e))?;
        Ok(out)
    }
}

/// A pooled connection idle for longer than this is checked before use.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Most statements kept prepared per connection; filters make many shapes.
const STMT_CACHE: usize = 256;

/// A connection or transaction with the connection's statement cache.
pub(super) struct Cx<'a, C: GenericClient> {
    pub(super) c: &'a mut C,
    stmts: &'a mut HashMap<String, Statement>,
    broken: &'a mut bool,
}

/// The engine's error for `e`, marking the connection broken when the
/// server is gone.
fn note(broken: &mut bool, e: postgres::Error) -> Error {
    let e = Error::from(e);
    if matches!(e, Error::Unavailable { .. }) {
        *broken = true;
    }
    e
}

impl<C: GenericClient> Cx<'_, C> {
    fn st(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.c.prepare(sql).map_err(|e| note(self.broken, e))?;
        if self.stmts.len() >= STMT_CACHE {
            self.stmts.clear();
        }
        self.stmts.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    pub(super) fn query(&mut self, sql: &str, p: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let st = self.st(sql)?;
        self.c.query(&st, p).map_err(|e| note(self.broken, e))
    }

    pub(super) fn query_p(&mut self, sql: &str, p: &[P]) -> Result<Vec<Row>> {
        self.query(sql, &refs(p))
    }

    pub(super) fn query_opt(
        &mut self,
        sql: &str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let st = self.st(sql)?;
        self.c.query_opt(&st, p).map_err(|e| note(self.broken, e))
    }

    pub(super) fn query_one(&mut self, sql: &str, p: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let st = self.st(sql)?;
        self.c.query_one(&st, p).map_err(|e| note(self.broken, e))
    }

    pub(super) fn execute(&mut self, sql: &str, p: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let st = self.st(sql)?;
        self.c.execute(&st, p).map_err(|e| note(self.broken, e))
    }

    pub(super) fn execute_p(&mut self, sql: &str, p: &[P]) -> Result<u64> {
        self.execute(sql, &refs(p))
    }

    /// Streams `rows` (each of `types`, in order) into `COPY … FROM STDIN
    /// (FORMAT binary)`: no statement to parse or plan per row, and no
    /// arrays to unpack. Returns how many rows went in.
    pub(super) fn copy_in(
        &mut self,
        sql: &str,
        types: &[postgres::types::Type],
        rows: impl Iterator<Item = Vec<P>>,
    ) -> Result<u64> {
        let w = self.c.copy_in(sql).map_err(|e| note(self.broken, e))?;
        let mut w = postgres::binary_copy::BinaryCopyInWriter::new(w, types);
        for row in rows {
            w.write(&refs(&row)).map_err(|e| note(self.broken, e))?;
        }
        w.finish().map_err(|e| note(self.broken, e))
    }

    /// Like [`Cx::query_one`], returning PostgreSQL's own error so the
    /// caller can tell a constraint violation from a failure.
    pub(super) fn query_one_raw(
        &mut self,
        sql: &str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<std::result::Result<Row, postgres::Error>> {
        let st = self.st(sql)?;
        let r = self.c.query_one(&st, p);
        if let Err(e) = &r
            && (e.is_closed() || e.as_db_error().is_none())
        {
            *self.broken = true;
        }
        Ok(r)
    }
}

/// The pool: idle connections and how many are open, at most `max`.
pub(super) struct Pool {
    state: Mutex<(Vec<Conn>, usize)>,
    freed: Condvar,
    pub(super) max: usize,
}

impl Pool {
    pub(super) fn new(max: usize) -> Pool {
        Pool {
            state: Mutex::new((Vec::new(), 0)),
            freed: Condvar::new(),
            max: max.max(1),
        }
    }
}

impl Drop for Pool {
    /// The idle connections close on a thread of their own: the
    /// synchronous client's drop runs a runtime of its own to end the
    /// session, which panics on a thread already inside one ("Cannot
    /// start a runtime from within a runtime"), such as a server's event
    /// loop that drops the last handle on the engine (issue 51: `serve`
    /// with `upkeep_every_secs = 0` aborted on SIGTERM).
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.state.get_mut().unwrap_or_else(|p| p.into_inner()).0);
        if idle.is_empty() {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("strata-pg-close".into())
            .spawn(move || drop(idle))
            .map(|t| t.join());
    }
}

/// A pooled connection, returned to the pool on drop (closed if broken).
pub(super) struct Pooled<'a> {
    store: &'a PostgresStore,
    conn: Option<Conn>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("pooled connection")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("pooled connection")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let pool = &self.store.pool;
        let mut g = pool.state.lock().unwrap_or_else(|p| p.into_inner());
        match self.conn.take() {
            Some(mut c) if !c.client.is_closed() && !c.broken => {
                c.idle_since = std::time::Instant::now();
                g.0.push(c)
            }
            _ => g.1 -= 1,
        }
        drop(g);
        pool.freed.notify_one();
    }
}

impl PostgresStore {
    /// A connection from the pool, opening one while fewer than the pool
    /// size are open, else waiting up to the connect timeout for one.
    pub(super) fn conn(&self) -> Result<Pooled<'_>> {
        let pool = &self.pool;
        let deadline = std::time::Instant::now() + self.opts.connect_timeout;
        let mut g = pool.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            while let Some(mut c) = g.0.pop() {
                // A connection idle for a while is checked with a round
                // trip first (outside the pool's lock): the server may have
                // restarted meanwhile, and a request should not fail on a
                // connection it closed.
                let usable = if c.client.is_closed() {
                    false
                } else if c.idle_since.elapsed() > IDLE_CHECK {
                    drop(g);
                    let ok = c.client.is_valid(self.opts.connect_timeout).is_ok();
                    g = pool.state.lock().unwrap_or_else(|p| p.into_inner());
                    ok
                } else {
                    true
                };
                if usable {
                    return Ok(Pooled {
                        store: self,
                        conn: Some(c),
                    });
                }
                // The server closed it (restarted, or the connection was
                // cut): open another.
                drop(c);
                g.1 -= 1;
            }
            if g.1 < pool.max {
                g.1 += 1;
                drop(g);
                return match self.connect() {
                    Ok(c) => Ok(Pooled {
                        store: self,
                        conn: Some(Conn::new(c)),
                    }),
                    Err(e) => {
                        let mut g = pool.state.lock().unwrap_or_else(|p| p.into_inner());
                        g.1 -= 1;
                        drop(g);
                        pool.freed.notify_one();
                        Err(e)
                    }
                };
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(unavailable(format!(
                    "all {} connections of the pool stayed busy for {} ms (store.pool_size)",
                    pool.max,
                    self.opts.connect_timeout.as_millis()
                )));
            }
            g = pool
                .freed
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
