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
}

impl Conn {
    pub(super) fn new(client: Client) -> Conn {
        Conn {
            client,
            stmts: HashMap::new(),
        }
    }

    /// The connection outside a transaction.
    pub(super) fn cx(&mut self) -> Cx<'_, Client> {
        Cx {
            c: &mut self.client,
            stmts: &mut self.stmts,
        }
    }

    /// Runs `f` in a transaction; commits when it returns `Ok`.
    pub(super) fn tx<T>(
        &mut self,
        f: impl FnOnce(&mut Cx<'_, postgres::Transaction<'_>>) -> Result<T>,
    ) -> Result<T> {
        let mut tx = self.client.transaction()?;
        let out = f(&mut Cx {
            c: &mut tx,
            stmts: &mut self.stmts,
        })?;
        tx.commit()?;
        Ok(out)
    }
}

/// Most statements kept prepared per connection; filters make many shapes.
const STMT_CACHE: usize = 256;

/// A connection or transaction with the connection's statement cache.
pub(super) struct Cx<'a, C: GenericClient> {
    pub(super) c: &'a mut C,
    stmts: &'a mut HashMap<String, Statement>,
}

impl<C: GenericClient> Cx<'_, C> {
    fn st(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.c.prepare(sql)?;
        if self.stmts.len() >= STMT_CACHE {
            self.stmts.clear();
        }
        self.stmts.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    pub(super) fn query(&mut self, sql: &str, p: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let st = self.st(sql)?;
        Ok(self.c.query(&st, p)?)
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
        Ok(self.c.query_opt(&st, p)?)
    }

    pub(super) fn query_one(&mut self, sql: &str, p: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let st = self.st(sql)?;
        Ok(self.c.query_one(&st, p)?)
    }

    pub(super) fn execute(&mut self, sql: &str, p: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let st = self.st(sql)?;
        Ok(self.c.execute(&st, p)?)
    }

    pub(super) fn execute_p(&mut self, sql: &str, p: &[P]) -> Result<u64> {
        self.execute(sql, &refs(p))
    }

    /// Like [`Cx::query_one`], returning PostgreSQL's own error so the
    /// caller can tell a constraint violation from a failure.
    pub(super) fn query_one_raw(
        &mut self,
        sql: &str,
        p: &[&(dyn ToSql + Sync)],
    ) -> Result<std::result::Result<Row, postgres::Error>> {
        let st = self.st(sql)?;
        Ok(self.c.query_one(&st, p))
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
            Some(c) if !c.client.is_closed() => g.0.push(c),
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
            while let Some(c) = g.0.pop() {
                if !c.client.is_closed() {
                    return Ok(Pooled {
                        store: self,
                        conn: Some(c),
                    });
                }
                // The server closed it (restarted, or the connection was
                // cut): open another.
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
