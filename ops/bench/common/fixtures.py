"""Realistic agent turns for the load benchmarks (English and Chinese, tool calls)."""

from __future__ import annotations

from typing import Any

_SERVICES = ("order-service", "payment-api", "inventory-svc", "checkout-gateway", "auth-service",
             "search-api", "billing-worker", "notify-service")  # fmt: skip
_ENVS = ("prod", "staging", "prod-eu", "canary", "uat")
_CAUSES = ("database", "cache", "network", "DNS", "GC", "disk", "connection pool", "load balancer")


def turn_messages(n: int) -> list[dict[str, Any]]:
    """A realistic agent turn (user ask, assistant reply with a tool call, a tool result),
    English or Chinese by turn number, with turn-specific entities and numbers so that the
    extractor finds new facts (and some restated ones) rather than one fact again and again.
    """
    svc = _SERVICES[n % len(_SERVICES)]
    env = _ENVS[(n // 3) % len(_ENVS)]
    cause = _CAUSES[(n // 2) % len(_CAUSES)]
    ticket = f"BUG-{1000 + n}"
    p99 = 180 + (n * 37) % 900
    call_id = f"call_{n}"
    if n % 2 == 0:
        user = (
            f"{ticket}: checkout on {env} is slow again, p99 around {p99} ms. "
            f"Please don't restart {svc} during business hours."
        )
        if n % 4 == 0:
            user += f" Remember that {ticket} is the ticket for this incident."
        assistant = (
            f"I'll look at the {svc} metrics first. "
            f"The {cause} looks healthy, so it is not the cause. "
            f"Next step: inspect the thread pool of {svc} on {env}."
        )
        tool = (
            f"2026-11-30T09:{n % 60:02d}:01Z INFO {svc} started request id=r{n}\n"
            f"2026-11-30T09:{n % 60:02d}:02Z WARN {svc} active_threads=200 max_threads=200\n"
            f"2026-11-30T09:{n % 60:02d}:03Z ERROR {svc} TimeoutException after {p99} ms "
            f"calling inventory-svc /api/v1/stock\n"
            f"2026-11-30T09:{n % 60:02d}:04Z INFO {svc} p99 latency {p99} ms"
        )
        name = "grep_logs"
    else:
        user = (
            f"{ticket}：{env} 环境的 {svc} 又超时了，延迟 {p99} ms。"
            f"不要动 {env} 的数据库配置。请用中文回答，先说结论。"
        )
        assistant = (
            f"已排除{cause}问题，{cause}指标正常。"
            f"确认根因是 {svc} 的连接池耗尽。"
            f"下一步：我们先把 {svc} 的连接池从 {20 + n % 30} 调到 {50 + n % 50}。"
        )
        tool = (
            f"[{svc}] pool.active=50 pool.max=50 waiting={n % 17}\n"
            f"[{svc}] 获取连接超时 {p99} ms，请求失败\n"
            f"[{svc}] HikariPool-1 - Connection is not available, request timed out after "
            f"{p99}ms\n"
            f"[{svc}] GC pause 12 ms"
        )
        name = "query_metrics"
    return [
        {"role": "user", "content": user},
        {
            "role": "assistant",
            "content": assistant,
            "tool_calls": [{"id": call_id, "name": name, "arguments": f'{{"service": "{svc}"}}'}],
        },
        {"role": "tool", "content": tool, "tool_call_id": call_id, "name": name},
    ]
