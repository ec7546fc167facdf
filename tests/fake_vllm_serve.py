"""Stand-in for ``trl vllm-serve`` in the tests of :mod:`olmpipe.train.vllm_server` (stdlib only).

Accepts the server flags olmpipe passes (``--port`` is the one it uses, the others are ignored),
answers ``GET /health`` (and TRL <= 1.15's ``/health/``) with 200, and records what it saw
(argv, pid, process group, selected environment variables, and ``"sigterm"`` when it gets one) as
JSON lines in ``--record``. Behaviour switches, placed before olmpipe's flags in ``program``:

- ``--delay S``: sleep S seconds before listening (a slow model load);
- ``--crash``: write an error and exit with code 3 at start;
- ``--child``: start a grandchild (like vLLM's engine and worker processes) that records SIGTERM
  too; only a signal to the whole process group reaches it;
- ``--ignore-term``: ignore SIGTERM (a hung server; only SIGKILL stops it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: The grandchild: records SIGTERM (unless ignored, as inherited with --ignore-term), then sleeps.
GRANDCHILD = (
    "import json, os, signal, sys, time\n"
    "def term(*args):\n"
    "    open(sys.argv[1], 'a').write(json.dumps({'event': 'sigterm', 'pid': os.getpid()}) + '\\n')\n"
    "    sys.exit(0)\n"
    "if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:\n"
    "    signal.signal(signal.SIGTERM, term)\n"
    "open(sys.argv[1], 'a').write(json.dumps({'event': 'child', 'pid': os.getpid()}) + '\\n')\n"
    "time.sleep(300)\n"
)


def record(path: str, **fields) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(fields) + "\n")


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path in ("/health", "/health/") else 404)
        self.end_headers()

    def log_message(self, fmt: str, *args) -> None:
        sys.stderr.write("fake vLLM: " + fmt % args + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    ns, _ = parser.parse_known_args()
    env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
    record(ns.record, event="start", pid=os.getpid(), pgid=os.getpgrp(), argv=sys.argv[1:], env=env)
    print(f"fake vLLM: loading model for {ns.delay} s", flush=True)
    if ns.crash:
        print("fake vLLM: CUDA out of memory while loading weights", file=sys.stderr, flush=True)
        return 3
    if ns.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        def on_term(signum, frame):
            record(ns.record, event="sigterm", pid=os.getpid())
            raise SystemExit(0)
        signal.signal(signal.SIGTERM, on_term)
    if ns.child:
        child = subprocess.Popen([sys.executable, "-c", GRANDCHILD, ns.record])
        marker = f'"pid": {child.pid}'
        while marker not in Path(ns.record).read_text(encoding="utf-8"):  # its SIGTERM handler is set
            time.sleep(0.01)
    time.sleep(ns.delay)
    server = HTTPServer((ns.host, ns.port), Health)
    print(f"fake vLLM: listening on {ns.host}:{ns.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
