#!/usr/bin/env bash
# Run nop headless in CI: one task, machine-readable result, exit code that CI understands.
#   NOP_MODEL and a key (OPENAI_API_KEY, ANTHROPIC_API_KEY or NOP_API_KEY) come from CI secrets;
#   NOP_PROVIDER=anthropic for Anthropic, NOP_BASE_URL for any other OpenAI-compatible server.
# Usage: examples/ci/nop-headless.sh "task"   (writes nop-result.json and nop-events.jsonl)
set -euo pipefail
task=${1:?usage: $0 TASK}

# No `nop init` needed: without .nop/ nop uses its built-in configuration and creates only
# .nop/sessions, .nop/logs and .nop/.gitignore.

# stream-json: one event per line, kept as a build artifact; the last line is the result.
set +e
nop run --output-format stream-json --max-turns 40 "$task" | tee nop-events.jsonl
code=${PIPESTATUS[0]}
set -e
tail -n 1 nop-events.jsonl > nop-result.json

case $code in
  0)   echo "nop completed the task" ;;
  3)   echo "nop is waiting for an answer: $(grep -o '"question":"[^"]*"' nop-result.json)" ;;
  130) echo "nop was cancelled" ;;
  *)   echo "nop failed (exit $code)" ;;
esac
# The session stays in .nop/sessions/ (upload it as an artifact to inspect or fork it later).
exit "$code"
