#!/usr/bin/env python3
"""The floor: a minimal coding agent, one `shell` tool in a loop against an OpenAI-compatible
server. What a harness adds to a small model is measured against this.

    floor_agent.py --base-url http://127.0.0.1:8091/v1 --model M --workdir DIR "task"

Prints one JSON line at the end: {"requests": N, "answer": "..."}."""

import argparse
import json
import subprocess
import sys
import urllib.request

SYSTEM = (
    "You are a coding agent working in a git repository (the current directory). "
    "Use the shell tool to inspect files, edit them (for example with python3, sed or a "
    "heredoc) and run tests. When the task is done, answer with a short summary."
)

SHELL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a bash command in the repository; returns exit code and output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command line."}},
            "required": ["command"],
        },
    },
}


def ask(base_url, model, messages, max_tokens):
    body = json.dumps(
        {"model": model, "messages": messages, "tools": [SHELL], "max_tokens": max_tokens}
    ).encode()
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer none"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)["choices"][0]["message"]


def run_shell(command, workdir):
    try:
        done = subprocess.run(
            ["bash", "-c", command], cwd=workdir, capture_output=True, text=True, timeout=60
        )
        output = (done.stdout + done.stderr)[-4000:]
        return f"exit code {done.returncode}\n{output}"
    except subprocess.TimeoutExpired:
        return "timed out after 60 s"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("task")
    args = parser.parse_args()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": args.task}]
    requests, answer = 0, ""
    for _ in range(args.max_turns):
        reply = ask(args.base_url, args.model, messages, args.max_tokens)
        requests += 1
        calls = reply.get("tool_calls") or []
        messages.append(
            {"role": "assistant", "content": reply.get("content") or "", "tool_calls": calls}
            if calls
            else {"role": "assistant", "content": reply.get("content") or ""}
        )
        if not calls:
            answer = reply.get("content") or ""
            break
        for call in calls:
            command = "?"
            try:
                command = json.loads(call["function"]["arguments"])["command"]
                result = run_shell(command, args.workdir)
            except (ValueError, KeyError, TypeError) as e:
                result = f"invalid arguments: {e}"
            print(f"$ {command}\n{result}", file=sys.stderr)
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
    print(json.dumps({"requests": requests, "answer": answer}))


if __name__ == "__main__":
    main()
