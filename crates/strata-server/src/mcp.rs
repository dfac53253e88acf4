//! The MCP server: tools over the same operations as the HTTP API, on stdio
//! (`strata mcp`) or streamable HTTP (`/mcp` in the `strata serve` app).
//!
//! Tool arguments are the HTTP bodies (same names, same JSON schemas).
//! Scope defaults (`[server.mcp]`, or `strata mcp --project P --session S`)
//! fill what a call leaves out, so a client pointed at a project needs no
//! scope in its calls. Over HTTP the bearer token's grant applies; on stdio
//! the server runs as the local user and sees every scope.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::Serialize;

use crate::Shared;
use crate::api::{ContextBody, ForgetBody, GetArgs, NoArgs, PromoteBody, RecallBody, RememberBody};
use crate::auth::Grant;
use crate::error::ApiError;
use crate::ops::Ctx;

const INSTRUCTIONS: &str = "strata is persistent, scoped memory. Call `recall` (or `context`) \
before answering questions about earlier work, decisions or preferences; call `remember` when \
a decision is made, something is learned, or the user states a preference. Scopes are paths: \
`project/<name>`, `task/<id>`, `session/<id>`, `global`.";

/// The MCP server handler.
#[derive(Clone)]
pub struct StrataMcp {
    shared: Arc<Shared>,
    /// `Some` on stdio (the local user's grant); over HTTP each request
    /// carries its token's grant.
    fixed_grant: Option<Grant>,
    tool_router: ToolRouter<StrataMcp>,
}

impl std::fmt::Debug for StrataMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrataMcp")
            .field("fixed_grant", &self.fixed_grant)
            .finish_non_exhaustive()
    }
}

/// Serves MCP on stdin/stdout until the client disconnects. Logs go to
/// stderr: stdout carries only protocol messages.
pub async fn serve_stdio(shared: Arc<Shared>) -> std::io::Result<()> {
    let server = StrataMcp::new(shared, Some(Grant::all()));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("MCP initialize failed: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| std::io::Error::other(format!("MCP server failed: {e}")))?;
    Ok(())
}

/// The streamable HTTP service mounted at `/mcp` (stateless, JSON responses).
pub fn http_service(shared: Arc<Shared>) -> StreamableHttpService<StrataMcp, LocalSessionManager> {
    let cfg = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(shared.allowed_hosts.clone())
        .with_max_request_body_bytes(shared.limits.max_body_bytes)
        .with_cancellation_token(shared.shutdown.child_token());
    StreamableHttpService::new(
        move || Ok(StrataMcp::new(shared.clone(), None)),
        Default::default(),
        cfg,
    )
}

impl StrataMcp {
    fn new(shared: Arc<Shared>, fixed_grant: Option<Grant>) -> StrataMcp {
        StrataMcp {
            shared,
            fixed_grant,
            tool_router: Self::tool_router(),
        }
    }

    fn grant(&self, ctx: &RequestContext<RoleServer>) -> Result<Grant, ErrorData> {
        if let Some(g) = &self.fixed_grant {
            return Ok(g.clone());
        }
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Grant>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("no credentials on this request", None))
    }

    async fn call<T, F>(&self, grant: Grant, f: F) -> Result<CallToolResult, ErrorData>
    where
        T: Serialize + Send + 'static,
        F: FnOnce(Ctx<'_>) -> Result<T, ApiError> + Send + 'static,
    {
        Ok(tool_result(self.shared.run(grant, f).await))
    }

    fn default_view(&self) -> Vec<String> {
        let d = &self.shared.mcp;
        let mut v = Vec::new();
        if let Some(p) = &d.project {
            v.push(format!("project/{p}/**"));
        }
        if let Some(s) = &d.session {
            v.push(format!("session/{s}"));
        }
        if !v.is_empty() {
            v.push("global".into());
        }
        v
    }
}

/// An operation's answer as a tool result. Errors are tool results, not
/// protocol errors, so the model reads what was wrong and can correct the
/// call.
fn tool_result<T: Serialize>(out: Result<T, ApiError>) -> CallToolResult {
    match out {
        Ok(v) => CallToolResult::success(vec![ContentBlock::text(
            serde_json::to_string_pretty(&v).unwrap_or_default(),
        )]),
        Err(e) => CallToolResult::error(vec![ContentBlock::text(
            serde_json::to_string(&e.body()).unwrap_or_default(),
        )]),
    }
}

#[tool_router]
impl StrataMcp {
    #[tool(
        description = "Store a memory: a decision, finding, preference, convention, failure or fact worth keeping across sessions. `scope` defaults to the configured project (`project/<p>`); `kind` classifies it; `key` makes later writes of the same key supersede it. Returns the stored memory with its id."
    )]
    async fn remember(
        &self,
        Parameters(mut b): Parameters<RememberBody>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let d = &self.shared.mcp;
        if b.scope.is_none() {
            b.scope = d
                .project
                .as_ref()
                .map(|p| format!("project/{p}"))
                .or_else(|| d.session.as_ref().map(|s| format!("session/{s}")));
        }
        if b.session.is_none() {
            b.session = d.session.clone();
        }
        self.call(grant, move |c| c.remember(&b)).await
    }

    #[tool(
        description = "Find memories relevant to a query, ranked (hybrid of BM25 relevance, decayed importance and recency by default). `view` lists the scopes to search (`project/acme/**` for a subtree, `global`); it defaults to the configured project, session and global. `filter` is JSON such as {\"kind\": \"decision\"}."
    )]
    async fn recall(
        &self,
        Parameters(mut b): Parameters<RecallBody>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        if b.view.is_empty() {
            b.view = self.default_view();
        }
        let light = b.is_light();
        let recall = move |c: crate::ops::Ctx<'_>| {
            c.recall(&b)
                .map(|hits| serde_json::json!({ "results": hits }))
        };
        let out = if light {
            self.shared.run_recall(grant, recall).await
        } else {
            self.shared.run(grant, recall).await
        };
        Ok(tool_result(out))
    }

    #[tool(
        description = "Assemble the context for a task within a token budget: the profile's sources (task, project, global, …) ranked and cut to fit, as markdown in `text`. `project` defaults to the configured project; `profile` defaults to `global`."
    )]
    async fn context(
        &self,
        Parameters(mut b): Parameters<ContextBody>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        let d = &self.shared.mcp;
        if b.project.is_none() {
            b.project = d.project.clone();
        }
        if b.session.is_none() {
            b.session = d.session.clone();
        }
        self.call(grant, move |c| c.context(&b)).await
    }

    #[tool(
        description = "Delete memories everywhere (row, index, archive, history): exactly one of `ids`, `filter` (with `view`), `session`, `scope`, `before` (with `view`). Use `dry_run` to see what would go."
    )]
    async fn forget(
        &self,
        Parameters(b): Parameters<ForgetBody>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.call(grant, move |c| c.forget(&b)).await
    }

    #[tool(
        description = "Copy a memory into another scope (for example from a task into its project) with a new id; the copy records where it came from."
    )]
    async fn promote(
        &self,
        Parameters(b): Parameters<PromoteBody>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.call(grant, move |c| c.promote(&b)).await
    }

    #[tool(description = "The scopes that hold memories (that this caller may see), with counts.")]
    async fn list_scopes(
        &self,
        Parameters(_): Parameters<NoArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.call(grant, |c| {
            c.scopes().map(|s| serde_json::json!({ "scopes": s }))
        })
        .await
    }

    #[tool(description = "One memory by id, optionally with its earlier versions (`history`).")]
    async fn get(
        &self,
        Parameters(b): Parameters<GetArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let grant = self.grant(&ctx)?;
        self.call(grant, move |c| c.get(&b.id, b.history)).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for StrataMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("strata", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}
