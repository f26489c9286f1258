"""`rerank: llm` inside Hermes: the user's own model judges whether passages answer a question.

Hermes 0.19.0 gives plugins two ways to its models: `ctx.llm` (the user's active model; keys never
seen by the plugin) and auxiliary tasks (`ctx.register_auxiliary_task`), which a user can pin to a
cheap model in `hermes model` under "Configure auxiliary models". The judge asks through the
auxiliary task `knowledgebase_rerank` where Hermes routes one, else through `ctx.llm`, always on a
thread of its own and bounded in time: a turn never waits on it longer than `rerank_timeout_s`, and
any failure leaves retrieval's order (reranker.LlmReranker is fail-open).
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Callable, Sequence

from hermes_kb.agent.knowledgebase.reranker import judge_prompt, parse_judgement

log = logging.getLogger(__name__)

TASK = "knowledgebase_rerank"
TASK_DEFAULTS = {"provider": "auto", "timeout": 10}
MAX_ANSWER_TOKENS = 200


def register_task(ctx: Any) -> bool:
    """Declare the auxiliary task (older Hermes has no such call: then ctx.llm alone)."""
    register = getattr(ctx, "register_auxiliary_task", None)
    if register is None:
        return False
    try:
        register(TASK, display_name="Knowledgebase relevance judge",
                 description="judges whether retrieved passages answer the question (knowledgebase rerank: llm)",
                 defaults=dict(TASK_DEFAULTS))
        return True
    except (ValueError, TypeError) as exc:
        log.info("the knowledgebase rerank task was not registered: %s", exc)
        return False


def _auxiliary_caller() -> Callable[..., Any] | None:
    try:
        from agent.auxiliary_client import call_llm  # Hermes's own module, present inside Hermes only
    except ImportError:
        return None
    return lambda messages, timeout: call_llm(TASK, messages=messages, timeout=timeout, max_tokens=MAX_ANSWER_TOKENS,
                                              temperature=0.0)


def _text(response: Any) -> str:
    """The answer's text from ctx.llm's result (`.text`) or an OpenAI-shaped response."""
    if hasattr(response, "text"):
        return str(response.text)
    try:
        return str(response.choices[0].message.content or "")
    except (AttributeError, IndexError, TypeError):
        return str(response)


def make_judge(ctx: Any, use_task: bool) -> Callable[[str, Sequence[str], float], list[float]] | None:
    """The judge reranker.LlmReranker calls, or None where Hermes gives this plugin no model."""
    llm = getattr(ctx, "llm", None)
    auxiliary = _auxiliary_caller() if use_task else None
    if llm is None and auxiliary is None:
        return None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="kb-judge")

    def ask(messages: list[dict], seconds: float) -> str:
        if auxiliary is not None:
            try:
                return _text(auxiliary(messages, seconds))
            except Exception as exc:  # noqa: BLE001  (no model routed for the task: the user's own model next)
                if llm is None:
                    raise
                log.info("the %s task could not answer (%s); asking the active model", TASK, exc)
        return _text(llm.complete(messages, timeout=seconds, max_tokens=MAX_ANSWER_TOKENS, temperature=0.0,
                                  purpose="knowledgebase rerank"))

    def judge(query: str, passages: Sequence[str], seconds: float) -> list[float]:
        messages = [{"role": "user", "content": judge_prompt(query, passages)}]
        future = pool.submit(ask, messages, seconds)
        try:
            answer = future.result(timeout=seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"the model gave no judgement within {seconds:g} s") from None
        return parse_judgement(answer, len(passages))

    return judge
