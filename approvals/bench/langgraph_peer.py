"""The bench's `plain` work built on LangGraph with its PostgreSQL checkpointer: the peer that
`approvals.bench.side_by_side` measures the portal against (the `peers` extra installs it).

A run is what a `plain` run is in the portal: a customer asks about an order; the model node
calls `lookup_order`, the tools node reads the order from PostgreSQL, the model node answers.
Two model calls and a tool call, each step checkpointed before the next starts (durability
"sync", as a step's commit is in the portal; `--durability async` for LangGraph's default).

- Sync (the default): PostgresSaver on a connection of its own in each of `--processes`
  processes, each running its share of the runs one after another; the model answers at once,
  as the portal's scripted model does in the bench (its word streaming pinned to 0).
- Async (`--base-url`): AsyncPostgresSaver on a pool in each process, `--in-flight` runs at
  once per process; the model node calls the endpoint with the openai AsyncOpenAI client,
  streaming, and writes each text delta to the graph's custom stream, which the driver reads
  as it is written (`first_delta_ms`: from the start of the call that writes the answer).

Every process starts once all are connected and their graphs built. The orders and the
checkpoints live in the database of `--database-url`, emptied first. Prints one JSON line.
"""

import argparse
import asyncio
import json
import multiprocessing
import operator
import re
import time
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
from psycopg.rows import dict_row

from approvals.bench.measure import percentiles

ORDER_ID = re.compile(r"\bORD-\d+\b")
QUESTION = "What is the status of order {order}?"
ITEM = {"sku": "SHOE-TRAIL-42", "name": "Trail running shoes", "size": "42", "quantity": 1}
LOOKUP_ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up one of the customer's orders by its number.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}
ORDERS_TABLE = "CREATE TABLE IF NOT EXISTS peer_orders (number text PRIMARY KEY, summary jsonb)"
CHECKPOINT_TABLES = "checkpoints, checkpoint_blobs, checkpoint_writes"
ORDER_QUERY = "SELECT summary FROM peer_orders WHERE number = %s"


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def order_number(index: int) -> str:
    return f"ORD-{100_000 + index}"


def order_summary(number: str) -> dict[str, Any]:
    return {
        "order_id": number,
        "status": "DELIVERED",
        "items": [ITEM],
        "total": "89.90",
        "currency": "EUR",
        "refunded": "0.00",
        "refundable": "89.90",
    }


def scripted_answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The portal's script for this question: look the order up, then say what it holds."""
    results = [message for message in messages if message["role"] == "tool"]
    if not results:
        number = ORDER_ID.search(messages[0]["content"]).group(0)
        arguments = json.dumps({"order_id": number})
        call = {"id": "call_1", "type": "function"}
        call["function"] = {"name": "lookup_order", "arguments": arguments}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    order = json.loads(results[-1]["content"])
    items = ", ".join(f"{i['name']} (size {i['size']}) x {i['quantity']}" for i in order["items"])
    return {
        "role": "assistant",
        "content": (
            f"Order {order['order_id']} is {order['status'].lower()}. It holds {items}; "
            f"total {order['total']} {order['currency']}, of which "
            f"{order['refundable']} {order['currency']} can still be refunded."
        ),
    }


def _tool_message(call: dict[str, Any], summary: Any) -> dict[str, Any]:
    content = json.dumps(summary if summary is not None else {"error": "no such order"})
    return {"role": "tool", "tool_call_id": call["id"], "content": content}


def _route(state: State) -> str:
    from langgraph.graph import END

    return "tools" if state["messages"][-1].get("tool_calls") else END


def build_graph(model_node, tools_node, checkpointer):
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    graph.add_node("model", model_node)
    graph.add_node("tools", tools_node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def prepare(database_url: str, runs: int) -> None:
    """The checkpointer's tables and an order per run; no checkpoint left from before."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with psycopg.connect(
        database_url, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        PostgresSaver(conn).setup()
        conn.execute(ORDERS_TABLE)
        conn.execute(f"TRUNCATE {CHECKPOINT_TABLES}, peer_orders")
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO peer_orders (number, summary) VALUES (%s, %s)",
                [
                    (number, json.dumps(order_summary(number)))
                    for number in map(order_number, range(runs))
                ],
            )
        conn.execute("VACUUM ANALYZE peer_orders")


def _sync_share(options: dict, share: list[int], start) -> dict:
    from langgraph.checkpoint.postgres import PostgresSaver

    url = options["database_url"]
    with (
        psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as saved,
        psycopg.connect(url, autocommit=True) as orders,
    ):

        def model(state: State) -> dict:
            return {"messages": [scripted_answer(state["messages"])]}

        def tools(state: State) -> dict:
            found = []
            for call in state["messages"][-1]["tool_calls"]:
                number = json.loads(call["function"]["arguments"])["order_id"]
                row = orders.execute(ORDER_QUERY, (number,)).fetchone()
                found.append(_tool_message(call, row[0] if row else None))
            return {"messages": found}

        graph = build_graph(model, tools, PostgresSaver(saved))
        start.wait()
        began, done = time.time(), []
        for index in share:
            config = {"configurable": {"thread_id": f"{options['tag']}-{index}"}}
            question = {"role": "user", "content": QUESTION.format(order=order_number(index))}
            state = graph.invoke({"messages": [question]}, config, durability=options["durability"])
            assert state["messages"][-1]["content"], state
            done.append(time.time())
        return {"began": began, "done": done, "first_delta": []}


async def _async_share(options: dict, share: list[int], start) -> dict:
    import openai
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.config import get_stream_writer
    from psycopg_pool import AsyncConnectionPool

    client = openai.AsyncOpenAI(base_url=options["base_url"], api_key="not-needed")
    pool = AsyncConnectionPool(
        options["database_url"],
        min_size=options["pool"],
        max_size=options["pool"],
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=False,
    )
    await pool.open(wait=True)

    async def model(state: State) -> dict:
        write = get_stream_writer()
        write({"requested": time.time()})
        text, calls = [], {}
        stream = await client.chat.completions.create(
            model="stub", messages=state["messages"], tools=[LOOKUP_ORDER], stream=True
        )
        async for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            if delta.content:
                text.append(delta.content)
                write({"text": delta.content})
            for part in delta.tool_calls or []:
                function = {"name": part.function.name, "arguments": ""}
                call = calls.setdefault(
                    part.index, {"id": part.id, "type": "function", "function": function}
                )
                call["function"]["arguments"] += part.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            message["tool_calls"] = [calls[index] for index in sorted(calls)]
        return {"messages": [message]}

    async def tools(state: State) -> dict:
        found = []
        async with pool.connection() as conn:
            for call in state["messages"][-1]["tool_calls"]:
                number = json.loads(call["function"]["arguments"])["order_id"]
                row = await (await conn.execute(ORDER_QUERY, (number,))).fetchone()
                found.append(_tool_message(call, row["summary"] if row else None))
        return {"messages": found}

    graph = build_graph(model, tools, AsyncPostgresSaver(pool))
    gate = asyncio.Semaphore(options["in_flight"])
    done: list[float] = []
    first_delta: list[float] = []

    async def one(index: int) -> None:
        config = {"configurable": {"thread_id": f"{options['tag']}-{index}"}}
        question = {"role": "user", "content": QUESTION.format(order=order_number(index))}
        async with gate:
            requested, heard = 0.0, {}
            async for part in graph.astream(
                {"messages": [question]},
                config,
                stream_mode="custom",
                durability=options["durability"],
            ):
                if "requested" in part:
                    requested = part["requested"]
                else:
                    heard.setdefault(requested, time.time())
            done.append(time.time())
            if requested in heard:
                first_delta.append(heard[requested] - requested)

    await asyncio.get_running_loop().run_in_executor(None, start.wait)
    began = time.time()
    await asyncio.gather(*(one(index) for index in share))
    await pool.close()
    await client.close()
    return {"began": began, "done": done, "first_delta": first_delta}


def _process(options: dict, share: list[int], start, results) -> None:
    try:
        if options["base_url"]:
            import uvloop

            results.put(uvloop.run(_async_share(options, share, start)))
        else:
            results.put(_sync_share(options, share, start))
    except BaseException as error:
        start.abort()
        results.put({"error": repr(error)})
        raise


def measure(options: dict) -> dict:
    """Run options["runs"] runs over options["processes"] processes; the figures."""
    prepare(options["database_url"], options["runs"])
    options = {**options, "tag": uuid.uuid4().hex[:12]}
    processes = options["processes"]
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(processes + 1), context.Queue()
    children = [
        context.Process(
            target=_process,
            args=(options, list(range(index, options["runs"], processes)), start, results),
        )
        for index in range(processes)
    ]
    for child in children:
        child.start()
    start.wait(timeout=options["timeout"])
    shares = [results.get(timeout=options["timeout"]) for _ in children]
    for child in children:
        child.join(timeout=30)
    errors = [share["error"] for share in shares if "error" in share]
    if errors:
        raise RuntimeError(f"a peer process failed: {errors[0]}")
    began = min(share["began"] for share in shares)
    done = [at - began for share in shares for at in share["done"]]
    first = [seconds * 1000 for share in shares for seconds in share["first_delta"]]
    result = {
        "peer": "langgraph-async" if options["base_url"] else "langgraph",
        "runs": len(done),
        "processes": processes,
        "runs_per_s": round(len(done) / max(done), 1),
        "queued_to_done_ms": percentiles([seconds * 1000 for seconds in done]),
        "durability": options["durability"],
    }
    if options["base_url"]:
        result["in_flight"] = options["in_flight"]
        result["first_delta_ms"] = percentiles(first) if first else None
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m approvals.bench.langgraph_peer")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--base-url", default="", help="A streaming endpoint: the async mode.")
    parser.add_argument("--in-flight", type=int, default=100, help="Runs at once per process.")
    parser.add_argument("--pool", type=int, default=10, help="Connections per process (async).")
    parser.add_argument("--durability", choices=["sync", "async"], default="sync")
    parser.add_argument("--timeout", type=float, default=600.0)
    options = vars(parser.parse_args(argv))
    print(json.dumps(measure(options)), flush=True)


if __name__ == "__main__":
    main()
