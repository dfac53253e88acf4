"""A LangGraph graph that remembers across threads, with strata as its store.

Each thread is a separate conversation (its own checkpointed state); what a
user asked to remember goes to the store under ("users", <id>, "memories"),
so any later thread, or a later process, can recall it.

    strata serve &                    # with the token of clients/python/README.md
    STRATA_TOKEN=strata_… python examples/remember_across_threads.py

STRATA_URL (default http://127.0.0.1:7077) and STRATA_TOKEN pick the server;
STRATA_ROOT (default project/acme, the project the README's token covers)
the scope the graph's namespaces live in. A token for another project needs
STRATA_ROOT=project/<it>.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from strata_client.langgraph import StrataStore


@dataclass
class Context:
    user_id: str


class State(TypedDict, total=False):
    message: str
    reply: str


def respond(state: State, runtime: Runtime[Context]) -> State:
    store = runtime.store
    assert store is not None, "compile the graph with a store"
    namespace = ("users", runtime.context.user_id, "memories")
    message = state["message"]
    if message.lower().startswith("remember "):
        fact = message[len("remember ") :]
        store.put(namespace, uuid.uuid4().hex, {"text": fact})
        return {"reply": f"Noted: {fact}"}
    hits = store.search(namespace, query=message, limit=1)
    if hits and hits[0].score:
        return {"reply": f"You told me: {hits[0].value['text']}"}
    return {"reply": "I don't know that yet."}


def build(store: StrataStore):  # type: ignore[no-untyped-def]
    graph = StateGraph(State, context_schema=Context)
    graph.add_node("respond", respond)
    graph.add_edge(START, "respond")
    graph.add_edge("respond", END)
    return graph.compile(checkpointer=InMemorySaver(), store=store)


def main() -> None:
    root = os.environ.get("STRATA_ROOT", "project/acme")
    with StrataStore(root=root) as store:
        app = build(store)
        user = Context(user_id=os.environ.get("DEMO_USER", "ada"))
        turns = [
            ("thread-1", "remember my favourite colour is teal"),
            ("thread-2", "what is my favourite colour?"),
            ("thread-3", "where do I live?"),
        ]
        for thread, message in turns:
            out = app.invoke({"message": message}, {"configurable": {"thread_id": thread}}, context=user)
            print(f"[{thread}] {message} -> {out['reply']}")


if __name__ == "__main__":
    main()
