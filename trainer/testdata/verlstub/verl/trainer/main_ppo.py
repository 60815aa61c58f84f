"""Stand-in for `python3 -m verl.trainer.main_ppo` (camproxy tests): takes grpo.sh's
Hydra overrides, checks the paths the way the real run would meet them, loads
reward.py exactly as verl/trainer/ppo/reward.py:get_custom_reward_fn does, and
scores one batch the way the installed version calls the reward function:

  < 0.7  verl/workers/reward_manager: naive calls compute_score(data_source=,
         solution_str=, ground_truth=, extra_info=) synchronously per item; batch
         calls compute_score(data_sources=, solution_strs=, ground_truths=,
         extra_infos=) once.
  >= 0.7 reward_model.use_reward_loop defaults to true; the reward loop's managers
         are naive, dapo, limited, remote ("Unknown reward manager: X" otherwise);
         RewardLoopWorker.compute_score_batch gathers run_single per item; naive's
         run_single awaits an async compute_score, or runs a sync one in the
         loop's default executor.

Prints {"rewards": [...], "mode": ...} on stdout.
"""
import asyncio
import importlib.util
import inspect
import json
import os
import sys
from functools import partial

import verl


def overrides(argv):
    cfg = {}
    for a in argv:
        k, _, v = a.lstrip("+").partition("=")
        cfg[k] = v
    return cfg


def version_tuple(v):
    major, minor = v.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()))


def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
    return raw_fn(*args, **{**kwargs, **extra_kwargs})


async def _call_with_kwargs_async(raw_fn, extra_kwargs, *args, **kwargs):
    return await raw_fn(*args, **{**kwargs, **extra_kwargs})


def get_custom_reward_fn(cfg):
    path, name = cfg["custom_reward_function.path"], cfg["custom_reward_function.name"]
    if not os.path.exists(path):
        raise FileNotFoundError(f"Reward function file '{path}' not found.")
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise AttributeError(f"Reward function '{name}' not found in '{module.__file__}'.")
    raw_fn = getattr(module, name)
    if not inspect.iscoroutinefunction(raw_fn):
        return partial(_call_with_kwargs, raw_fn, {})
    return partial(_call_with_kwargs_async, raw_fn, {})


def check_paths(cfg):
    model = cfg["actor_rollout_ref.model.path"]
    if model.startswith("/") or model.startswith("."):
        if not os.path.isfile(os.path.join(model, "config.json")):
            sys.exit(f"stub main_ppo: model {model}: no config.json there")
    elif model.count("/") != 1:
        sys.exit(f"stub main_ppo: model {model} is neither a directory nor a hub id")
    for k in ("data.train_files", "data.val_files", "custom_reward_function.path"):
        if not os.path.isfile(cfg[k]):
            sys.exit(f"stub main_ppo: {k}={cfg[k]}: no such file (cwd {os.getcwd()})")
    if not os.path.isabs(cfg["trainer.default_local_dir"]):
        sys.exit("stub main_ppo: trainer.default_local_dir is relative: under Ray it lands in the job's temporary working_dir")


def batch():
    return json.loads(os.environ["VERL_STUB_BATCH"])  # [{"data_source","solution_str","ground_truth","extra_info"}]


def legacy(cfg, fn, items):
    name = cfg.get("reward_model.reward_manager", "naive")
    if name == "naive":
        out = []
        for it in items:
            score = fn(data_source=it["data_source"], solution_str=it["solution_str"],
                       ground_truth=it["ground_truth"], extra_info=dict(it["extra_info"]))
            if not isinstance(score, (int, float, dict)):  # reward_tensor[i, length - 1] = score
                raise TypeError(f"the reward of item {len(out)} is a {type(score).__name__}, not a number")
            out.append(score)
        return out
    if name == "batch":
        return list(fn(data_sources=[it["data_source"] for it in items], solution_strs=[it["solution_str"] for it in items],
                       ground_truths=[it["ground_truth"] for it in items], extra_infos=[dict(it["extra_info"]) for it in items]))
    if name in ("dapo", "prime"):
        raise NotImplementedError(name)
    raise ValueError(f"Unknown reward manager: {name}")


def reward_loop(cfg, fn, items):
    name = cfg.get("reward_model.reward_manager", "naive")
    if name not in ("naive", "dapo", "limited", "remote"):
        raise ValueError(f"Unknown reward manager: {name}")
    is_async = inspect.iscoroutinefunction(fn)

    async def run_single(it):
        loop = asyncio.get_running_loop()
        kw = dict(data_source=it["data_source"], solution_str=it["solution_str"], ground_truth=it["ground_truth"],
                  extra_info=dict(it["extra_info"]))
        if is_async:
            return await fn(**kw)
        return await loop.run_in_executor(None, lambda: fn(**kw))

    async def compute_score_batch():
        return await asyncio.gather(*(asyncio.create_task(run_single(it)) for it in items))

    return list(asyncio.run(compute_score_batch()))


def main():
    cfg = overrides(sys.argv[1:])
    check_paths(cfg)
    fn = get_custom_reward_fn(cfg)
    if version_tuple(verl.__version__) >= (0, 7) and cfg.get("reward_model.use_reward_loop", "True") == "True":
        rewards = reward_loop(cfg, fn, batch())
    else:
        rewards = legacy(cfg, fn, batch())
    print(json.dumps({"rewards": rewards, "apply_chat_template_kwargs": cfg.get("data.apply_chat_template_kwargs", "")}))


if __name__ == "__main__":
    main()
