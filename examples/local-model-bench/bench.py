#!/usr/bin/env python3
"""Runs small self-checking coding tasks through nop (or the floor agent) against a local
OpenAI-compatible server, and reports per task: passed, model requests, time.

    bench.py --agent nop --nop PATH [--base-url URL] [--model M] [--only NAME,...]
    bench.py --agent floor

Each task gets a fresh git repository under /var/tmp/nop-local-bench/ (kept for reading the
sessions afterwards), a time limit (--limit-s, 300 s), then its check command. nop's requests
are the sum of `usage.requests` over every session in the task's .nop/sessions (advisors and
subagents included: they are requests to the same server). Not a test: it needs the local
model of ../shared/local-model/ and takes up to half an hour."""

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tasks import TASKS  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def make_repo(root, task):
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(root)
    for path, text in task["files"].items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(git + ["init", "-q"], cwd=root, check=True)
    subprocess.run(git + ["add", "-A"], cwd=root, check=True)
    subprocess.run(git + ["commit", "-qm", "start"], cwd=root, check=True)


def clean_env(args, root):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOP_", "CARGO_TARGET"))}
    env.update({"NOP_BASE_URL": args.base_url, "NOP_MODEL": args.model, "NOP_PROVIDER": "openai"})
    return env


def run_limited(command, cwd, env, limit, log):
    """Runs `command` in its own process group; kills the group at `limit` seconds."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=out,
            start_new_session=True, text=True,
        )
        try:
            stdout, _ = proc.communicate(timeout=limit)
            return stdout, False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            return stdout, True


def nop_requests(root):
    total = 0
    for path in glob.glob(os.path.join(root, ".nop/sessions/**/session.json"), recursive=True):
        try:
            with open(path) as f:
                total += json.load(f).get("usage", {}).get("requests", 0)
        except (OSError, ValueError):
            pass
    return total


def run_task(args, task):
    root = os.path.join(args.work, task["name"])
    make_repo(root, task)
    env = clean_env(args, root)
    log = os.path.join(args.work, f"{task['name']}.{args.agent}.log")
    started = time.monotonic()
    if args.agent == "nop":
        command = [args.nop, "run", "--yes", "--max-turns", str(args.max_turns),
                   "--output-format", "json", task["prompt"]]
    else:
        command = [sys.executable, os.path.join(HERE, "floor_agent.py"),
                   "--base-url", args.base_url, "--model", args.model, "--workdir", root,
                   "--max-turns", str(args.max_turns), "--max-tokens", str(args.max_tokens),
                   task["prompt"]]
    stdout, timed_out = run_limited(command, root, env, args.limit_s, log)
    elapsed = time.monotonic() - started
    with open(log, "a") as f:
        f.write("\n--- stdout ---\n" + (stdout or ""))
    status = "timeout" if timed_out else "done"
    if args.agent == "nop":
        requests = nop_requests(root)
        try:
            status = json.loads(stdout.strip().splitlines()[-1]).get("status", status)
        except (ValueError, IndexError, AttributeError):
            pass
    else:
        try:
            requests = json.loads(stdout.strip().splitlines()[-1])["requests"]
        except (ValueError, IndexError, KeyError, AttributeError):
            requests = None
    check = subprocess.run(["bash", "-c", task["check"]], cwd=root, capture_output=True,
                           timeout=120, env={k: v for k, v in env.items() if k != "CARGO_TARGET_DIR"})
    return {"task": task["name"], "passed": check.returncode == 0, "requests": requests,
            "time_s": round(elapsed, 1), "status": status}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", choices=["nop", "floor"], default="nop")
    parser.add_argument("--nop", default="nop", help="the nop binary to measure")
    parser.add_argument("--base-url", default="http://127.0.0.1:8091/v1")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--work", default="/var/tmp/nop-local-bench")
    parser.add_argument("--limit-s", type=float, default=300)
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=1024, help="the floor agent's cap")
    parser.add_argument("--only", default="", help="comma-separated task names")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    args.work = os.path.join(args.work, args.agent)
    os.makedirs(args.work, exist_ok=True)
    if args.agent == "nop":
        args.nop = os.path.abspath(shutil.which(args.nop) or args.nop)
    only = [n for n in args.only.split(",") if n]
    results = []
    print(f"{'task':<22} {'passed':<7} {'requests':>8} {'time':>8}  status", flush=True)
    for task in TASKS:
        if only and task["name"] not in only:
            continue
        r = run_task(args, task)
        results.append(r)
        print(f"{r['task']:<22} {'yes' if r['passed'] else 'no':<7} {str(r['requests']):>8} "
              f"{r['time_s']:>7.1f}s  {r['status']}", flush=True)
    passed = sum(r["passed"] for r in results)
    requests = sum(r["requests"] or 0 for r in results)
    seconds = sum(r["time_s"] for r in results)
    print(f"{'total':<22} {passed}/{len(results):<5} {requests:>8} {seconds:>7.1f}s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"agent": args.agent, "date": datetime.now().isoformat(timespec="minutes"),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
