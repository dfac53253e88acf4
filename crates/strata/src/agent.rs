//! Agents and pipelines: memory composed with an execution mode (DESIGN §6).
//!
//! An [`Agent`] records its turns and builds the context for its next call:
//!
//! - `stateless` remembers nothing; its context is the profile's alone;
//! - `session` keeps the turns of one session (`session/<id>`);
//! - `persistent` keeps every session's turns in the agent's own scope
//!   (`project/<p>/agent/<name>`, or `agent/<name>` without a project), so
//!   a new session starts with what earlier ones said;
//! - `learning` is `persistent` plus what upkeep's detectors learned
//!   (`source = learned`) in the agent's scope and its project's.
//!
//! A pipeline node ([`NodeSpec`]) names the context it reads (`"none"`,
//! `"global"` or a profile) and where its output is written
//! (`write_to_memory: {store: task|project|global, tags}`); the output is
//! stored after the node runs, so the next node's context sees it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Result;
use crate::context::{
    ContextPackage, ContextRequest, Profile, ProfileSource, Render, SummarizerKind,
};
use crate::engine::{Confirm, Engine};
use crate::error::Error;
use crate::model::{Kind, Memory, NewMemory, Role};
use crate::rank::Strategy;
use crate::scope::{Scope, validate_segment};
use crate::store::Session;

/// How much an agent remembers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Depth {
    /// Nothing between calls.
    Stateless,
    /// The turns of the current session.
    #[default]
    Session,
    /// The turns of every session, in the agent's own scope.
    Persistent,
    /// As persistent, and the context also holds what upkeep learned from
    /// the agent's and its project's memories.
    Learning,
}

impl std::str::FromStr for Depth {
    type Err = Error;
    fn from_str(s: &str) -> Result<Depth> {
        match s {
            "stateless" => Ok(Depth::Stateless),
            "session" => Ok(Depth::Session),
            "persistent" => Ok(Depth::Persistent),
            "learning" => Ok(Depth::Learning),
            _ => Err(Error::field(
                "depth",
                format!("`{s}` is not one of stateless, session, persistent, learning"),
            )),
        }
    }
}

/// An agent handle: a name, a depth, a context profile and the session it
/// is in.
#[derive(Debug)]
pub struct Agent<'e> {
    engine: &'e Engine,
    name: String,
    depth: Depth,
    profile: String,
    vars: BTreeMap<String, String>,
    session: Option<Session>,
    /// Share of the budget kept for the agent's own turns.
    conversation_share: f64,
    /// Share of the budget kept for what was learned (learning depth).
    learned_share: f64,
    /// Budget when the profile is `"none"`.
    max_tokens: u32,
    /// Its sessions live in the hot tier only.
    ephemeral: bool,
}

impl<'e> Agent<'e> {
    /// An agent named `name` (one scope segment). `project`, when given,
    /// fills `{project}` and places a persistent agent's memory under the
    /// project. Session and persistent agents start a new session.
    pub fn new(
        engine: &'e Engine,
        name: &str,
        depth: Depth,
        project: Option<&str>,
    ) -> Result<Agent<'e>> {
        validate_segment(name).map_err(|r| Error::field("agent", r))?;
        let mut vars = BTreeMap::new();
        vars.insert("agent".to_string(), name.to_string());
        if let Some(p) = project {
            validate_segment(p).map_err(|r| Error::field("project", r))?;
            vars.insert("project".to_string(), p.to_string());
        }
        let session = match depth {
            Depth::Stateless => None,
            Depth::Session => Some(engine.create_session(None, None, None)?),
            Depth::Persistent | Depth::Learning => {
                let scope = match project {
                    Some(p) => Scope::parse(&format!("project/{p}/agent/{name}"))?,
                    None => Scope::parse(&format!("agent/{name}"))?,
                };
                Some(engine.create_session(None, Some(scope), None)?)
            }
        };
        if let Some(s) = &session {
            vars.insert("session".to_string(), s.id.clone());
        }
        Ok(Agent {
            engine,
            name: name.to_string(),
            depth,
            profile: "none".into(),
            vars,
            session,
            conversation_share: 0.4,
            learned_share: 0.2,
            max_tokens: 4000,
            ephemeral: false,
        })
    }

    /// A session-depth agent whose turns live only in this process's hot
    /// tier (`[hot]`): nothing it says reaches the store or any file, its
    /// context holds its session's last `hot.turns` memories, and they
    /// vanish with [`Agent::new_session`], `forget` and the process.
    pub fn ephemeral(engine: &'e Engine, name: &str, project: Option<&str>) -> Result<Agent<'e>> {
        validate_segment(name).map_err(|r| Error::field("agent", r))?;
        if let Some(p) = project {
            validate_segment(p).map_err(|r| Error::field("project", r))?;
        }
        let session = engine.open_ephemeral_session(None, None)?;
        let mut vars = BTreeMap::new();
        vars.insert("agent".to_string(), name.to_string());
        if let Some(p) = project {
            vars.insert("project".to_string(), p.to_string());
        }
        vars.insert("session".to_string(), session.id.clone());
        Ok(Agent {
            engine,
            name: name.to_string(),
            depth: Depth::Session,
            profile: "none".into(),
            vars,
            session: Some(session),
            conversation_share: 0.4,
            learned_share: 0.2,
            max_tokens: 4000,
            ephemeral: true,
        })
    }

    /// Whether its sessions live in the hot tier only.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    /// Uses `profile` (`"none"`, `"global"` or a configured id) for context.
    pub fn with_profile(mut self, profile: &str) -> Result<Agent<'e>> {
        self.engine.resolve_profile(profile)?;
        self.profile = profile.to_string();
        Ok(self)
    }

    /// Fills a placeholder (`task`, `sprint`, …) for every context.
    pub fn with_var(mut self, name: &str, value: &str) -> Agent<'e> {
        self.vars.insert(name.to_string(), value.to_string());
        self
    }

    /// Budget used when the profile is `"none"` (default 4000).
    pub fn with_max_tokens(mut self, n: u32) -> Agent<'e> {
        self.max_tokens = n;
        self
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its depth.
    pub fn depth(&self) -> Depth {
        self.depth
    }

    /// The current session, unless stateless.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// Records one exchange (both turns in one transaction). A stateless
    /// agent records nothing.
    pub fn remember_turn(&self, user: &str, assistant: &str) -> Result<Vec<Memory>> {
        let Some(s) = &self.session else {
            return Ok(Vec::new());
        };
        let turn = |role: Role, text: &str| {
            NewMemory::new(s.scope.clone(), text)
                .kind(Kind::Conversation)
                .role(role)
                .session(s.id.clone())
                .tag(format!("agent:{}", self.name))
        };
        self.engine.remember_batch(
            vec![turn(Role::User, user), turn(Role::Assistant, assistant)],
            Confirm::No,
        )
    }

    /// The context for the next call: the profile's sources plus, unless
    /// stateless, the agent's own turns ("Conversation so far").
    pub fn context(&self, query: &str) -> Result<ContextPackage> {
        let mut prof = match self.engine.resolve_profile(&self.profile)? {
            Some(p) => p,
            None => Profile {
                id: "none".into(),
                max_tokens: self.max_tokens,
                strategy: Strategy::Recency,
                head_tail: 0,
                summary_share: 0.0,
                summarizer: SummarizerKind::Extractive,
                render: Render::Messages,
                include_sensitive: false,
                sources: Vec::new(),
            },
        };
        if let Some(s) = &self.session {
            let scope = s.scope.to_string();
            if !prof.sources.iter().any(|src| src.scope == scope) {
                let c = if prof.sources.is_empty() {
                    1.0
                } else {
                    self.conversation_share
                };
                for src in &mut prof.sources {
                    src.share = src.share.map(|x| x * (1.0 - c));
                }
                prof.sources.push(ProfileSource {
                    title: "Conversation so far".into(),
                    // Summaries: what compaction made of the oldest turns.
                    kinds: vec![Kind::Conversation, Kind::Summary],
                    share: Some(c),
                    ..ProfileSource::new(scope)
                });
            }
        }
        if self.depth == Depth::Learning
            && let Some(s) = &self.session
        {
            self.add_learned(&mut prof, &s.scope);
        }
        if prof.sources.is_empty() {
            return self.engine.context(&ContextRequest::new("none"));
        }
        let mut req = ContextRequest::new(prof.id.clone()).query(query);
        req.vars = self.vars.clone();
        self.engine.context_with_profile(&prof, &req)
    }

    /// Adds a source of learned memories for the agent's scope and, when it
    /// has one, its project's, sharing `learned_share` of the budget.
    fn add_learned(&self, prof: &mut Profile, own: &Scope) {
        let mut scopes = vec![own.to_string()];
        if let Some(p) = self.vars.get("project") {
            scopes.push(format!("project/{p}"));
        }
        let n = scopes.len() as f64;
        let l = if prof.sources.is_empty() {
            1.0
        } else {
            self.learned_share
        };
        for src in &mut prof.sources {
            src.share = src.share.map(|x| x * (1.0 - l));
        }
        for scope in scopes {
            prof.sources.push(ProfileSource {
                title: "What was learned".into(),
                filter: Some(serde_json::json!({"source": "learned"})),
                share: Some(l / n),
                ..ProfileSource::new(scope)
            });
        }
    }

    /// Ends the session: its turns move to the archive (a persistent agent's
    /// turns stay in its scope), and a new session begins.
    pub fn new_session(&mut self) -> Result<()> {
        let Some(old) = self.session.take() else {
            return Ok(());
        };
        let next = if self.ephemeral {
            self.engine.archive_session(&old.id)?;
            self.engine.open_ephemeral_session(None, None)?
        } else if matches!(self.depth, Depth::Persistent | Depth::Learning) {
            self.engine
                .create_session(None, Some(old.scope.clone()), None)?
        } else {
            self.engine.archive_session(&old.id)?;
            self.engine.create_session(None, None, None)?
        };
        self.vars.insert("session".to_string(), next.id.clone());
        self.session = Some(next);
        Ok(())
    }
}

/// Where a node's output is written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteSpec {
    /// `task`, `project` or `global`.
    pub store: String,
    /// Tags added to the output (besides `node:<name>`).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Kind of the output memory (default `finding`).
    #[serde(default)]
    pub kind: Option<String>,
}

/// One pipeline node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Node name (one scope segment).
    pub name: String,
    /// `"none"`, `"global"` or a profile id.
    #[serde(default = "none")]
    pub context: String,
    /// Where the output goes; nowhere when unset.
    #[serde(default)]
    pub write_to_memory: Option<WriteSpec>,
    /// The node's query (ranks its context).
    #[serde(default)]
    pub query: Option<String>,
    /// For `strata pipeline run`: the command that runs the node (`sh -c`),
    /// reading the rendered context on stdin and printing the output.
    #[serde(default)]
    pub command: Option<String>,
}

fn none() -> String {
    "none".into()
}

/// What running a node produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRun {
    /// The node.
    pub node: String,
    /// The context it was given.
    pub package: ContextPackage,
    /// What it returned.
    pub output: String,
    /// The memory its output was written to.
    pub memory: Option<Memory>,
}

/// Runs pipeline nodes over one engine with shared placeholder values
/// (`task`, `project`, …).
#[derive(Debug)]
pub struct Pipeline<'e> {
    engine: &'e Engine,
    vars: BTreeMap<String, String>,
}

impl<'e> Pipeline<'e> {
    /// A pipeline with no placeholder values.
    pub fn new(engine: &'e Engine) -> Pipeline<'e> {
        Pipeline {
            engine,
            vars: BTreeMap::new(),
        }
    }

    /// Fills a placeholder for every node.
    pub fn with_var(mut self, name: &str, value: &str) -> Pipeline<'e> {
        self.vars.insert(name.to_string(), value.to_string());
        self
    }

    /// The scope a write spec names, or an error naming the node and field.
    fn target(&self, node: &NodeSpec, w: &WriteSpec) -> Result<Scope> {
        let need = |var: &str| {
            self.vars.get(var).ok_or_else(|| {
                Error::field(
                    format!("nodes.{}.write_to_memory.store", node.name),
                    format!("`{}` needs a {var} for the pipeline", w.store),
                )
            })
        };
        match w.store.as_str() {
            "task" => Scope::task(need("task")?),
            "project" => Scope::project(need("project")?),
            "global" => Ok(Scope::global()),
            other => Err(Error::field(
                format!("nodes.{}.write_to_memory.store", node.name),
                format!("`{other}` is not one of task, project, global"),
            )),
        }
    }

    /// Checks a node before running anything: its name, its profile, where
    /// it writes, its tags and kind.
    pub fn check(&self, node: &NodeSpec) -> Result<()> {
        validate_segment(&node.name).map_err(|r| Error::field("nodes.name", r))?;
        self.engine
            .resolve_profile(&node.context)
            .map_err(|e| Error::field(format!("nodes.{}.context", node.name), e))?;
        if let Some(w) = &node.write_to_memory {
            self.target(node, w)?;
            crate::model::validate_tags(&w.tags).map_err(|e| {
                Error::field(format!("nodes.{}.write_to_memory.tags", node.name), e)
            })?;
            if let Some(k) = &w.kind {
                k.parse::<Kind>().map_err(|e| {
                    Error::field(format!("nodes.{}.write_to_memory.kind", node.name), e)
                })?;
            }
        }
        Ok(())
    }

    /// The context a node reads.
    pub fn context_for(&self, node: &NodeSpec, query: &str) -> Result<ContextPackage> {
        let mut req = ContextRequest::new(node.context.clone()).query(query);
        req.vars = self.vars.clone();
        self.engine.context(&req)
    }

    /// Builds the node's context, runs it, and writes its output where the
    /// spec says (after it ran, so the next node sees it).
    pub fn run_node(
        &self,
        node: &NodeSpec,
        query: &str,
        run: impl FnOnce(&ContextPackage) -> String,
    ) -> Result<NodeRun> {
        self.check(node)?;
        let package = self.context_for(node, query)?;
        let output = run(&package);
        let memory = self.record(node, &package, &output)?;
        Ok(NodeRun {
            node: node.name.clone(),
            package,
            output,
            memory,
        })
    }

    /// Writes a node's output per its spec (nothing for empty output or no
    /// spec).
    pub fn record(
        &self,
        node: &NodeSpec,
        package: &ContextPackage,
        output: &str,
    ) -> Result<Option<Memory>> {
        let Some(w) = &node.write_to_memory else {
            return Ok(None);
        };
        if output.trim().is_empty() {
            return Ok(None);
        }
        let scope = self.target(node, w)?;
        let kind = match &w.kind {
            Some(k) => k.parse()?,
            None => Kind::Finding,
        };
        let mut n = NewMemory::new(scope, output.trim_end())
            .kind(kind)
            .payload(serde_json::json!({ "node": node.name, "context_package": package.id }))
            .source(crate::model::Source::Learned);
        n.tags = w.tags.clone();
        n.tags.push(format!("node:{}", node.name));
        self.engine.remember(n).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn engine() -> Engine {
        let mut c = Config::in_memory();
        c.apply_toml(
            "[profiles.coder]\nmax_tokens = 500\n[[profiles.coder.sources]]\nlayer = \"project\"\n",
            None,
        )
        .unwrap();
        Engine::open(c).unwrap()
    }

    #[test]
    fn depths_remember_what_they_should() {
        let e = engine();
        let a = Agent::new(&e, "helper", Depth::Stateless, None).unwrap();
        assert!(a.remember_turn("hi", "hello").unwrap().is_empty());
        assert!(a.context("x").unwrap().items.is_empty());

        let mut s = Agent::new(&e, "helper", Depth::Session, Some("acme")).unwrap();
        s.remember_turn("my name is Ada", "nice to meet you, Ada")
            .unwrap();
        let p = s.context("").unwrap();
        let msgs = p.messages();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert_eq!(
            (msgs[0].role.as_str(), msgs[0].content.as_str()),
            ("user", "my name is Ada")
        );
        s.new_session().unwrap();
        assert!(
            s.context("").unwrap().items.is_empty(),
            "a new session starts empty"
        );

        let mut p = Agent::new(&e, "planner", Depth::Persistent, Some("acme"))
            .unwrap()
            .with_profile("coder")
            .unwrap();
        p.remember_turn("we use Postgres", "noted: Postgres")
            .unwrap();
        p.new_session().unwrap();
        let pkg = p.context("database").unwrap();
        assert!(
            pkg.markdown().contains("we use Postgres"),
            "{}",
            pkg.markdown()
        );
        assert!(Agent::new(&e, "bad name", Depth::Session, None).is_err());
        assert_eq!("learning".parse::<Depth>().unwrap(), Depth::Learning);
        assert!("learned".parse::<Depth>().is_err());
    }

    #[test]
    fn a_node_output_is_visible_to_the_next_node() {
        let e = engine();
        let pipe = Pipeline::new(&e).with_var("project", "acme");
        let plan = NodeSpec {
            name: "planner".into(),
            context: "none".into(),
            write_to_memory: Some(WriteSpec {
                store: "project".into(),
                tags: vec!["plan".into()],
                kind: Some("decision".into()),
            }),
            query: None,
            command: None,
        };
        let run = pipe
            .run_node(&plan, "plan", |_| "Plan: build the parser first".into())
            .unwrap();
        let m = run.memory.unwrap();
        assert_eq!(m.scope.as_str(), "project/acme");
        assert!(m.tags.contains(&"node:planner".to_string()));
        let code = NodeSpec {
            name: "coder".into(),
            context: "coder".into(),
            write_to_memory: None,
            query: None,
            command: None,
        };
        let run = pipe
            .run_node(&code, "parser", |ctx| {
                assert!(ctx.markdown().contains("build the parser first"));
                "done".into()
            })
            .unwrap();
        assert!(run.memory.is_none());

        let bad = |spec: NodeSpec, want: &str| {
            let err = pipe.check(&spec).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        };
        bad(
            NodeSpec {
                context: "nope".into(),
                ..code.clone()
            },
            "nodes.coder.context",
        );
        let mut w = plan.clone();
        w.write_to_memory.as_mut().unwrap().store = "team".into();
        bad(w, "nodes.planner.write_to_memory.store");
        let mut w = plan.clone();
        w.write_to_memory.as_mut().unwrap().store = "task".into();
        bad(w, "needs a task");
        let mut w = plan;
        w.write_to_memory.as_mut().unwrap().kind = Some("Bad Kind".into());
        bad(w, "write_to_memory.kind");
    }
}
