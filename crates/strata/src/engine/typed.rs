//! The seeds' typed operations: conversation turns, decisions, findings,
//! preferences, and their finders.

use super::*;

impl Engine {
    /// Records a conversation turn in a session (created on first use), in
    /// the session's scope.
    pub fn store_conversation(&self, session: &str, role: Role, message: &str) -> Result<Memory> {
        model::validate_session_id(session)?;
        let now = self.now();
        self.ensure_session(session, &Scope::parse(&format!("session/{session}"))?, now)?;
        let s = self
            .store
            .get_session(session)?
            .ok_or_else(|| Error::SessionNotFound(session.into()))?;
        self.remember(
            NewMemory::new(s.scope, message)
                .kind(Kind::Conversation)
                .role(role)
                .session(session),
        )
    }

    /// Records a decision with its options, choice and reasoning.
    pub fn store_decision(
        &self,
        scope: Scope,
        question: &str,
        options: &[String],
        chosen: &str,
        reasoning: &str,
    ) -> Result<Memory> {
        if question.trim().is_empty() {
            return Err(Error::field("question", "is empty"));
        }
        if chosen.trim().is_empty() {
            return Err(Error::field("chosen", "is empty"));
        }
        let content = format!("Decision: {question} — chose {chosen}. Reasoning: {reasoning}");
        self.remember(
            NewMemory::new(scope, content)
                .kind(Kind::Decision)
                .payload(json!({"question": question, "options": options, "chosen": chosen, "reasoning": reasoning})),
        )
    }

    /// Records a finding on a topic.
    pub fn store_finding(
        &self,
        scope: Scope,
        topic: &str,
        summary: &str,
        details: &str,
        sources: &[String],
    ) -> Result<Memory> {
        if topic.trim().is_empty() {
            return Err(Error::field("topic", "is empty"));
        }
        let content = if details.is_empty() {
            format!("{topic}: {summary}")
        } else {
            format!("{topic}: {summary}\n{details}")
        };
        self.remember(NewMemory::new(scope, content).kind(Kind::Finding).payload(
            json!({"topic": topic, "summary": summary, "details": details, "sources": sources}),
        ))
    }

    /// Records a preference under `key`: the same key in the same scope
    /// supersedes the old value and keeps it as history. Global preferences
    /// need `Confirm::Yes`.
    pub fn store_preference(
        &self,
        scope: Scope,
        key: &str,
        value: &str,
        confirm: Confirm,
    ) -> Result<Memory> {
        self.remember_with(
            NewMemory::new(scope, format!("{key}: {value}"))
                .kind(Kind::Preference)
                .key(key)
                .payload(json!({"key": key, "value": value})),
            confirm,
        )
    }

    /// The newest memories in a view, optionally of one kind.
    pub fn recent(&self, view: &View, limit: usize, kind: Option<&Kind>) -> Result<Vec<Memory>> {
        let mut req = List::new(view.clone());
        req.limit = limit;
        if let Some(k) = kind {
            req.filter = Filter::parse(&json!({"kind": k.as_str()}))?;
        }
        self.list(&req)
    }

    /// A session's conversation turns, oldest first.
    pub fn conversation_history(&self, session: &str) -> Result<Vec<Memory>> {
        model::validate_session_id(session)?;
        if self.is_ephemeral(session) {
            let q = Query::everything(self.now()).filter(Filter::parse(
                &json!({"session": session, "kind": "conversation"}),
            )?);
            let mut held: Vec<Memory> = self
                .hot_candidates(&q, &[])
                .into_iter()
                .map(|(m, _)| m)
                .collect();
            held.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
            return Ok(held);
        }
        if self.store.get_session(session)?.is_none() {
            return Err(Error::SessionNotFound(session.into()));
        }
        let q = Query::everything(self.now())
            .filter(Filter::parse(
                &json!({"session": session, "kind": "conversation"}),
            )?)
            .order(Order::Oldest);
        self.store.query(&q)
    }

    /// Decisions in a view, optionally about a topic (full-text) and within a
    /// time range.
    pub fn find_decisions(
        &self,
        view: &View,
        topic: Option<&str>,
        since: Option<Timestamp>,
        until: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let mut f = vec![json!({"kind": "decision"})];
        if let Some(s) = since {
            f.push(json!({"created_at": {"$gte": s.as_millisecond()}}));
        }
        if let Some(u) = until {
            f.push(json!({"created_at": {"$lt": u.as_millisecond()}}));
        }
        self.find(view, Filter::parse(&json!({"$and": f}))?, topic, limit)
    }

    /// Findings in a view about a topic (full-text).
    pub fn find_findings(&self, view: &View, topic: &str, limit: usize) -> Result<Vec<Memory>> {
        self.find(
            view,
            Filter::parse(&json!({"kind": "finding"}))?,
            Some(topic),
            limit,
        )
    }

    pub(super) fn find(
        &self,
        view: &View,
        filter: Filter,
        topic: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        match topic.filter(|t| !t.trim().is_empty()) {
            Some(t) => {
                let mut r = Recall::new(t, view.clone());
                r.filter = filter;
                r.strategy = Some(Strategy::Relevance);
                r.limit = limit;
                r.touch = false;
                Ok(self.recall(&r)?.into_iter().map(|r| r.memory).collect())
            }
            None => {
                let mut l = List::new(view.clone());
                l.filter = filter;
                l.limit = limit;
                self.list(&l)
            }
        }
    }
}
