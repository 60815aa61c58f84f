"""camproxy reward function for veRL GRPO: the reward of a CAM context is the reward
of an agent run that used it.

Written by `camproxy train grpo`. Python standard library only. For each response the
CAM generated, compute_score strips any <think> block, asks camproxy's rollout API
(POST /v1/rollouts) to run the agent on the task with that context fixed, and returns
the reward the agent's harness posted for that run. A response with no context left
(a <think> cut off by the length limit) is not run like the baseline: it scores
CAMPROXY_EMPTY_REWARD.

Environment (all optional):
  CAMPROXY_ROLLOUT_URL        camproxy's admin base URL (default: {{rollout_url}})
  CAMPROXY_ROLLOUT_TIMEOUT_S  seconds one agent run may take once it runs (default: {{timeout_s}})
  CAMPROXY_QUEUE_TIMEOUT_S    seconds a rollout may wait for one of camproxy's
                              rollouts.max_in_flight slots, not counted in the run's
                              timeout (default: {{queue_timeout_s}}; 0 = camproxy's
                              rollouts.queue_timeout)
  CAMPROXY_EMPTY_REWARD       the score of a response with no context (default: {{empty_reward}})
  CAMPROXY_ADMIN_TOKEN        sent as a bearer token when camproxy's admin plane requires one
  CAMPROXY_REWARD_ON_ERROR    the score of a rollout that failed or timed out (default: 0);
                              "raise" stops training instead
  CAMPROXY_REWARD_CONCURRENCY rollouts in flight from this process at once (default: 256)

veRL entry points (grpo.sh picks one by the installed veRL):
  compute_score        async, one response: veRL >= 0.7's reward loop awaits it and
                       gathers a batch's responses, so they run concurrently
  compute_score_batch  sync, a whole batch at once, concurrently: veRL < 0.7's batch
                       reward manager (reward_model.reward_manager=batch)
  compute_score_sync   sync, one response (veRL < 0.7's naive manager; one rollout at a time)
"""

import asyncio
import concurrent.futures
import json
import os
import re
import sys
import urllib.error
import urllib.request

ROLLOUT_URL = os.environ.get("CAMPROXY_ROLLOUT_URL", "{{rollout_url}}").rstrip("/")
TIMEOUT_S = float(os.environ.get("CAMPROXY_ROLLOUT_TIMEOUT_S", "{{timeout_s}}"))
QUEUE_TIMEOUT_S = float(os.environ.get("CAMPROXY_QUEUE_TIMEOUT_S", "{{queue_timeout_s}}"))
EMPTY_REWARD = float(os.environ.get("CAMPROXY_EMPTY_REWARD", "{{empty_reward}}"))
ON_ERROR = os.environ.get("CAMPROXY_REWARD_ON_ERROR", "0")
TOKEN = os.environ.get("CAMPROXY_ADMIN_TOKEN", "")
CONCURRENCY = int(os.environ.get("CAMPROXY_REWARD_CONCURRENCY", "256"))

# Blocking HTTP calls run here: asyncio's default executor has min(32, CPUs + 4)
# threads, which would serialise a batch of rollouts on a small driver.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="camproxy-rollout")

_THINK = re.compile(r"<think>.*?</think>", re.S)


class RolloutError(Exception):
    """A rollout that produced no reward."""


def strip_think(text):
    """The context is what the CAM answered after its reasoning, if it reasoned."""
    text = _THINK.sub("", text or "")
    cut = text.find("<think>")  # opened and never closed: cut off by the length limit
    if cut >= 0:
        text = text[:cut]
    end = text.rfind("</think>")  # closed but opened by the chat template in the prompt
    if end >= 0:
        text = text[end + len("</think>"):]
    return text.strip()


def _post_rollout(body):
    headers = {"Content-Type": "application/json"}
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    req = urllib.request.Request(ROLLOUT_URL + "/v1/rollouts", data=json.dumps(body).encode("utf-8"),
                                 headers=headers, method="POST")
    try:
        # camproxy answers 504 itself after queue_timeout_s waiting or timeout_s
        # running; the socket timeout is a backstop (it bounds each read, and the
        # answer comes in one piece at the end). 0 = camproxy's own queue_timeout,
        # which this cannot know: a day, camproxy's bound.
        with urllib.request.urlopen(req, timeout=TIMEOUT_S + (QUEUE_TIMEOUT_S or 86400) + 30) as resp:
            out = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")
        try:
            detail = json.loads(detail)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            detail = detail[:300]
        raise RolloutError("HTTP %d: %s" % (e.code, detail)) from None
    except (urllib.error.URLError, OSError) as e:
        raise RolloutError("%s unreachable: %s" % (ROLLOUT_URL, getattr(e, "reason", e))) from None
    if not isinstance(out.get("reward"), (int, float)):
        raise RolloutError("answer without a numeric reward: %.300s" % json.dumps(out))
    return float(out["reward"])


def _failed(task_id, err):
    if ON_ERROR == "raise":
        raise err
    print("camproxy reward: task %s: %s; scoring %s" % (task_id, err, ON_ERROR), file=sys.stderr, flush=True)
    return float(ON_ERROR)


async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """veRL's custom reward signature; kwargs takes what newer reward loops add."""
    extra_info = extra_info or {}
    context = strip_think(solution_str)
    if not context:
        # No context is not the baseline's empty context: the CAM failed to write one.
        print("camproxy reward: task %s: no context left after the <think> block (cut off by the length limit?); scoring %s"
              % (ground_truth, EMPTY_REWARD), file=sys.stderr, flush=True)
        return EMPTY_REWARD
    body = {
        "task_id": str(ground_truth),
        "task": extra_info.get("task", ""),
        "context": context,
        "timeout_s": TIMEOUT_S,
    }
    if QUEUE_TIMEOUT_S > 0:
        body["queue_timeout_s"] = QUEUE_TIMEOUT_S
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(_POOL, _post_rollout, body)
    except RolloutError as err:
        return _failed(ground_truth, err)


def compute_score_sync(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return asyncio.run(compute_score(data_source, solution_str, ground_truth, extra_info))


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    async def all_scores():
        return await asyncio.gather(*(
            compute_score(d, s, g, e) for d, s, g, e in zip(data_sources, solution_strs, ground_truths, extra_infos)))
    return list(asyncio.run(all_scores()))
